"""Framework integrations: one module per framework, each importing its framework lazily.

- ``openarmature``: records as openarmature's own types, typed states.
- ``langgraph``: ``LmdbSaver``, a LangGraph ``BaseCheckpointSaver`` on the log (its
  materialized views live in ``langgraph_store``).
- ``techrevati``: techrevati-runtime's ``CheckpointSaver`` on the log.
- ``apflow``: an apflow ``CheckpointManager`` stand-in on the log.
"""
