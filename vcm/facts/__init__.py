"""Structured memory: facts, state and the rules around them (pure; the service does the I/O).

* :mod:`~vcm.facts.rules` — fact types, lifetimes, write validation;
* :mod:`~vcm.facts.guard` — the policy guard (secrets, PII, poisoning) run before every write;
* :mod:`~vcm.facts.dedup` — MATCH / NEW / CONFLICT against the agent's facts;
* :mod:`~vcm.facts.capture` — ``[MEMORY:type]`` / ``[STATE:key]`` tags in assistant replies.
"""
