"""RL environments: prompt sets with verifiable answers, answer parsers and reward functions.

A data package (it never imports the trainer): ``prompt_sets`` turns public math data (GSM8K) and the
quickstart's arithmetic into prompt records, ``answers`` reads final answers out of text, ``rewards`` holds
the registry of pure reward functions, and ``EnvironmentConfig.build`` loads a prompt set checked against
the fields its rewards read. The RL loop that samples and trains on them is ``marin.posttrain.rl``.
"""

from marin.environments.answers import final_answer, marked_answer, numbers_equal, parse_number
from marin.environments.environment import BadPromptRecord, Environment, EnvironmentConfig, RewardError
from marin.environments.prompt_sets import (
    GSM8K_URLS,
    Gsm8kConfig,
    InstructionPromptsConfig,
    generate_instruction_prompts,
    prepare_gsm8k,
)
from marin.environments.rewards import REWARDS, get_reward, register_reward

__all__ = [
    "GSM8K_URLS",
    "REWARDS",
    "InstructionPromptsConfig",
    "BadPromptRecord",
    "Environment",
    "EnvironmentConfig",
    "Gsm8kConfig",
    "RewardError",
    "final_answer",
    "generate_instruction_prompts",
    "get_reward",
    "marked_answer",
    "numbers_equal",
    "parse_number",
    "prepare_gsm8k",
    "register_reward",
]
