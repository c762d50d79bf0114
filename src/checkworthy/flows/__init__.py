"""Prefect flows and deployments: tasks wrap package functions; flows only wire them."""
