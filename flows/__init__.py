"""Prefect flows and deployments: tasks wrap package functions; flows only wire them.

Importing this package first keeps every tool it loads (Prefect, DVC, Hugging Face) off the network.
"""

from checkworthy.config import quiet_offline_env

quiet_offline_env()
