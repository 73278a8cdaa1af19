"""Reward functions for examples/agent_calculator.toml, written as for TRL's GRPOTrainer.

In a multi-turn run each completion is the episode's conversation after the prompt: assistant
turns (with ``tool_calls`` when the model made one), tool results, observations.
"""


def called_the_calculator(completions, **kwargs):
    """1.0 when the episode made a well-formed call to the calculator, else 0.0."""
    return [1.0 if any(m.get("role") == "assistant" and any(c["function"]["name"] == "calculator"
                                                            for c in m.get("tool_calls", []))
                       for m in completion) else 0.0
            for completion in completions]
