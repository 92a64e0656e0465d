"""Where frames are stored: the backend contract and its implementations."""
