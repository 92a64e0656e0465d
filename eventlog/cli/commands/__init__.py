"""One module per ``ckptlog`` command: ``add_arguments(parser)`` and ``run(ctx)``."""
