"""Pure folds of frames into records, summaries and history."""
