"""The tools an agent can call; each declares whether it only reads or writes."""
