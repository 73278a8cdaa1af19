"""Rewards: built-in reward functions and the machinery that combines reward plugins."""
