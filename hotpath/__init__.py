"""The hot path proper: token counting, the pure budget policy, Redis hot state and its Lua
scripts, and the assembly of the main context."""
