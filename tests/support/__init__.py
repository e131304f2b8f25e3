"""The tests' shared helpers: local servers, clients, scripted sessions, CLI runners.

Not tests themselves: modules the test folders import (``from support.openai_server
import ...``), as pytest puts ``tests/`` on ``sys.path`` for them.
"""
