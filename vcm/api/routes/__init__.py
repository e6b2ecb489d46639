"""The HTTP API's routes, one module per resource, each with its own ``router``;
:func:`vcm.api.app.create_app` includes them. Shared dependencies are :mod:`vcm.api.deps`'s."""
