from caseshelf.functions.export import app, lambda_handler  # noqa: F401 - the Lambda entry point
