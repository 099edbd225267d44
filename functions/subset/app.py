from caseshelf.functions.subset import app, lambda_handler  # noqa: F401 - the Lambda entry point
