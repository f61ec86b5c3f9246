"""RL with verifiable rewards (GRPO): rollouts through the lab's engine, a clipped policy-gradient update
with the trainer's state, optimizer and checkpoints, reproducible to the bit (docs/rl.md)."""
