"""vcm where agent builders already are: framework integrations over the client SDK.

- :mod:`vcm.integrations.agents`: ``VcmSession``, an OpenAI Agents SDK session whose history is
  the agent's managed context (``pip install "vcm[agents]"``).
- :mod:`vcm.integrations.langgraph`: ``VcmStore``, a LangGraph ``BaseStore`` over vcm's state
  and facts (``pip install "vcm[langgraph]"``).

Both talk to a running vcm server through :class:`~vcm.client.VcmClient` (or
:class:`~vcm.client.AsyncVcmClient`) and import nothing server-side (an import contract in
pyproject.toml). Nothing here is imported by ``import vcm``; each module imports its framework
only when it is imported itself.
"""
