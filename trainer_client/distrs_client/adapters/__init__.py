"""Framework adapters: verl custom reward functions and a TRL ``reward_funcs`` callable."""
