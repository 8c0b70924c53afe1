"""Collectors of real learning curves (tabular, vision, RL) and the shipped trace library.

Kept apart from ``mara_env`` because they need torch; ``mara_env`` only reads the result.
"""
