"""The prompt an agent's model sees: layers around the hot context (pure; I/O in the service)."""
