"""Agent adapters: one small class per CLI behind the Agent protocol."""
