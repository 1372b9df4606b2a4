"""Example DistRS reward plugin (see docs/sandbox.md, "Reward plugins")."""
