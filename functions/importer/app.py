from caseshelf.functions.importer import app, lambda_handler  # noqa: F401 - the Lambda entry point
