"""ckptlog: an event-sourced, append-only checkpoint log."""
