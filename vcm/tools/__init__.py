"""The LLM-facing tools: their JSON schemas, the executor that runs them, result paging and the
heartbeat governor."""
