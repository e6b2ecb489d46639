"""Running an agent: the loop over an OpenAI-compatible chat endpoint with vcm's tools."""
