"""The API's routes by concern (FastAPI routers): scoring, explanation, health; the application
(:func:`checkworthy.serve.app.create_app`) includes them."""
