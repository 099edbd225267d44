from caseshelf.functions.tasks import app, lambda_handler  # noqa: F401 - the Lambda entry point
