from caseshelf.functions.export_worker import lambda_handler  # noqa: F401 - the Lambda entry point
