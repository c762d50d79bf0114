"""Prefect flows and deployments: tasks wrap package functions; flows only wire them.

Importing this package changes no process state: the command line applies
:func:`checkworthy.config.quiet_offline_env` before it loads Prefect, the model loaders before they
load a model, and the production image sets the same variables in its environment.
"""
