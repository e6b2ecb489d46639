"""The HTTP API (FastAPI): routes, request/response models, coded errors and bearer-token auth."""
