from caseshelf.functions.diff import app, lambda_handler  # noqa: F401 - the Lambda entry point
