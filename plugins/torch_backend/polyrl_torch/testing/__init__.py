"""Test-only builders that need torch (the core's torch-free ones are in ``polyrl.testing``)."""
