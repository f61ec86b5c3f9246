"""Post-training: what follows SFT (preference optimization, RL with verifiable rewards), on the trainer and
the inference engine; neither of them imports this package."""
