"""Public path of the reward server (docs, launch scripts); the code lives in `rubricrl.serve`."""

from rubricrl.serve.app import ROUTES, JudgeFailures, ERROR_RESPONSES, create_app, RedactToken, serve, uvicorn_config  # noqa: F401

__all__ = ['ROUTES', 'JudgeFailures', 'ERROR_RESPONSES', 'create_app', 'RedactToken', 'serve', 'uvicorn_config']
