"""The SAM template deploys what the design promises: it lints, it transforms, every route needs the
authorizer, the bucket and table are private and encrypted, policies are narrow, logs expire."""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest

from caseshelf.adapters.s3 import AREA_TAG, TRANSIENT_AREAS, area_of
from caseshelf.domain import layout
from tests.moto_infra import ROOT, TEMPLATE, load_template

pytestmark = pytest.mark.integration

BROAD_SAM_POLICIES = {"S3CrudPolicy", "S3FullAccessPolicy", "S3WritePolicy", "AmazonS3FullAccess"}
BROAD_ACTIONS = {"*", "s3:*", "dynamodb:*", "iam:*", "kms:*"}


def resources(kind: str) -> dict[str, dict[str, Any]]:
    return {n: r for n, r in load_template()["Resources"].items() if r["Type"] == kind}


def functions() -> dict[str, dict[str, Any]]:
    return resources("AWS::Serverless::Function")


def api_events() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for fname, fn in functions().items():
        for ename, event in (fn["Properties"].get("Events") or {}).items():
            if event["Type"] == "Api":
                yield fname, ename, event["Properties"]


def statements(fn: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for policy in fn["Properties"].get("Policies") or []:
        if isinstance(policy, dict) and "Statement" in policy:
            yield from policy["Statement"]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@pytest.fixture(scope="module")
def transformed() -> dict[str, Any]:
    """The template as `sam package` + CloudFormation's SAM transform would see it."""
    from samtranslator.translator.transform import transform

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    doc = copy.deepcopy(load_template())
    for res in doc["Resources"].values():
        if res["Type"] == "AWS::Serverless::Function":
            res["Properties"]["CodeUri"] = "s3://deploy-bucket/function.zip"
        if res["Type"] == "AWS::Serverless::LayerVersion":
            res["Properties"]["ContentUri"] = "s3://deploy-bucket/layer.zip"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        out: dict[str, Any] = transform(doc, {}, NoManagedPolicies())
    return out


def test_cfn_lint_passes() -> None:
    from cfnlint.api import ManualArgs, lint_file

    matches = lint_file(TEMPLATE, config=ManualArgs(regions=["us-east-1"]))
    assert [str(m) for m in matches] == []


def test_every_route_goes_through_the_authorizer(transformed: dict[str, Any]) -> None:
    # Given the API's default authorizer
    api = load_template()["Resources"]["Api"]["Properties"]
    default = api["Auth"]["DefaultAuthorizer"]
    assert default in api["Auth"]["Authorizers"]
    # Every Api event belongs to that API and none opts out
    events = list(api_events())
    assert events, "the template declares no routes"
    for fname, ename, props in events:
        assert props.get("RestApiId") == {"Ref": "Api"}, f"{fname}.{ename} is on an implicit API"
        auth = props.get("Auth") or {}
        assert auth.get("Authorizer", default) != "NONE", f"{fname}.{ename} is anonymous"
    # And in the deployed definition every operation requires it
    [rest_api] = [
        r for r in transformed["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"
    ]
    operations = [
        (path, method, op)
        for path, methods in rest_api["Properties"]["Body"]["paths"].items()
        for method, op in methods.items()
        if method != "options"
    ]
    assert len(operations) == len(events)
    for path, method, op in operations:
        assert op.get("security") == [{default: []}], f"{method.upper()} {path} is anonymous"
    # The API's CORS preflights (the Api's `Cors`) run no function: mock answers, headers only
    preflights = [
        op
        for methods in rest_api["Properties"]["Body"]["paths"].values()
        for method, op in methods.items()
        if method == "options"
    ]
    assert len(preflights) == len({props["Path"] for _f, _e, props in events})
    for op in preflights:
        assert op["x-amazon-apigateway-integration"]["type"] == "mock"


def test_path_parameters_have_one_name_per_level() -> None:
    # API Gateway refuses /datasets/{id} next to /datasets/{name}: siblings must agree.
    names: dict[tuple[str, ...], set[str]] = {}
    for _f, _e, props in api_events():
        parts = props["Path"].strip("/").split("/")
        for i, part in enumerate(parts):
            if part.startswith("{"):
                names.setdefault(tuple(parts[:i]), set()).add(part)
    clashes = {"/".join(k): v for k, v in names.items() if len(v) > 1}
    assert clashes == {}


def test_function_code_and_layer_exist() -> None:
    base = TEMPLATE.parent
    assert functions()
    for name, fn in functions().items():
        code = (base / fn["Properties"]["CodeUri"]).resolve()
        module, handler = fn["Properties"]["Handler"].split(".")
        source = code / f"{module}.py"
        assert source.is_file(), f"{name}: no {source}"
        # The entry point is a one-line import of the package's function module
        # (tests/integration/test_route_table.py checks which one)
        assert re.search(rf"import .*\b{handler}\b", source.read_text(encoding="utf-8")), name
    [layer] = resources("AWS::Serverless::LayerVersion").values()
    content = (base / layer["Properties"]["ContentUri"]).resolve()
    assert (content / "caseshelf" / "__init__.py").is_file()
    assert (content / "requirements.txt").is_file()
    globals_fn = load_template()["Globals"]["Function"]
    assert {"Ref": "CaseshelfLayer"} in globals_fn["Layers"]


def test_layer_requirements_are_project_dependencies() -> None:
    def name(req: str) -> str:
        return re.split(r"[\[<>=!~ ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    # The layer is the base install plus the extras a deployed function uses
    extras = project["project"]["optional-dependencies"]
    runtime = [*project["project"]["dependencies"]]
    for extra in ("aws", "http", "parquet", "zstd", "harbor"):
        runtime += extras[extra]
    declared = {name(r) for r in runtime}
    lines = (ROOT / "shared" / "requirements.txt").read_text(encoding="utf-8").splitlines()
    layer = {name(r) for r in lines if r.strip() and not r.startswith("#")}
    assert layer <= declared
    assert "boto3" in layer, "put-if-absent needs a boto3 newer than some runtimes bundle"


def test_bucket_is_private_encrypted_and_tls_only() -> None:
    bucket = load_template()["Resources"]["DataBucket"]["Properties"]
    assert bucket["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    [sse] = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"aws:kms", "AES256"}
    policy = resources("AWS::S3::BucketPolicy")["DataBucketPolicy"]
    deny_plain = [
        s
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s["Effect"] == "Deny"
        and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") in ("false", False)
    ]
    assert deny_plain, "no statement denies requests without TLS"
    [stmt] = deny_plain
    assert stmt["Principal"] == "*" and stmt["Action"] in ("s3:*", ["s3:*"])
    assert {"Fn::GetAtt": ["DataBucket", "Arn"]} in stmt["Resource"]
    assert {"Fn::Sub": "${DataBucket.Arn}/*"} in stmt["Resource"]


def test_lifecycle_rules_reach_the_objects_the_store_tags() -> None:
    rules = load_template()["Resources"]["DataBucket"]["Properties"]["LifecycleConfiguration"]
    by_area = {}
    for rule in rules["Rules"]:
        for tag in rule.get("TagFilters") or []:
            if tag["Key"] == AREA_TAG:
                by_area[tag["Value"]] = rule
        # A literal prefix rule for a transient area would match nothing: keys start with t/.
        assert not str(rule.get("Prefix", "")).startswith(TRANSIENT_AREAS)
    assert set(by_area) == set(TRANSIENT_AREAS)
    assert all(r["Status"] == "Enabled" and r["ExpirationInDays"] > 0 for r in by_area.values())
    # And the keys the registry writes into those areas are the ones the store tags
    assert area_of(layout.download_key("acme", "sha256:" + "a" * 64)) == "exports"
    assert area_of("t/acme/uploads/u1") == "uploads"
    assert area_of(layout.pack_key("acme", "a" * 64)) is None
    assert area_of(layout.manifest_key("acme", "sha256:" + "a" * 64)) is None


def test_table_is_on_demand_recoverable_and_encrypted() -> None:
    table = load_template()["Resources"]["IndexTable"]["Properties"]
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["SSESpecification"]["SSEEnabled"] is True
    assert [k["AttributeName"] for k in table["KeySchema"]] == ["pk", "sk"]


def test_policies_are_narrow() -> None:
    assert functions()
    for name, fn in functions().items():
        for policy in fn["Properties"].get("Policies") or []:
            named = set(policy) if isinstance(policy, dict) else {policy}
            assert not named & BROAD_SAM_POLICIES, f"{name} has a bucket-wide write policy"
        for stmt in statements(fn):
            actions = set(as_list(stmt["Action"]))
            assert not actions & BROAD_ACTIONS, f"{name}: {stmt}"
            assert "*" not in as_list(stmt["Resource"]), f"{name}: {stmt}"
            for res in as_list(stmt["Resource"]):
                arn = res.get("Fn::Sub", "") if isinstance(res, dict) else str(res)
                assert arn != "${DataBucket.Arn}/*", f"{name} writes anywhere in the bucket"


def test_registry_reaches_only_tenant_objects_and_index_rows() -> None:
    registry = functions()["RegistryFunction"]
    stmts = list(statements(registry))
    s3_objects = [
        s for s in stmts if any(a.startswith("s3:") and "Object" in a for a in as_list(s["Action"]))
    ]
    assert s3_objects
    for stmt in s3_objects:
        assert stmt["Resource"] == {"Fn::Sub": "${DataBucket.Arn}/t/*"}
        assert "s3:DeleteObject" not in as_list(stmt["Action"])
    ddb = {a for s in stmts for a in as_list(s["Action"]) if a.startswith("dynamodb:")}
    assert {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"} <= ddb
    assert not ddb & {"dynamodb:Scan", "dynamodb:DeleteItem", "dynamodb:DeleteTable"}


def test_uploads_and_drops_reach_the_importer_through_eventbridge(
    transformed: dict[str, Any],
) -> None:
    # The bucket sends its events to EventBridge, never straight to a function (that would make
    # the bucket and the function reference each other)
    bucket = load_template()["Resources"]["DataBucket"]["Properties"]
    assert bucket["NotificationConfiguration"] == {
        "EventBridgeConfiguration": {"EventBridgeEnabled": True}
    }
    # The importer's rule takes object-created events of this bucket's uploads and drops
    res = transformed["Resources"]
    rules = [
        r
        for r in res.values()
        if r["Type"] == "AWS::Events::Rule" and "EventPattern" in r["Properties"]
    ]
    [rule] = [
        r
        for r in rules
        if any(
            t["Arn"] == {"Fn::GetAtt": ["ImporterFunction", "Arn"]}
            for t in r["Properties"]["Targets"]
        )
    ]
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.s3"] and pattern["detail-type"] == ["Object Created"]
    assert pattern["detail"]["bucket"]["name"] == [{"Ref": "DataBucket"}]
    assert pattern["detail"]["object"]["key"] == [
        {"wildcard": "t/*/uploads/*"},
        {"wildcard": "t/*/imports/*"},
    ]
    # And EventBridge may invoke it; the function writes and removes uploads, nothing wider
    invokers = [
        r["Properties"]
        for r in res.values()
        if r["Type"] == "AWS::Lambda::Permission"
        and r["Properties"]["FunctionName"] == {"Ref": "ImporterFunction"}
    ]
    assert any(p["Principal"] == "events.amazonaws.com" for p in invokers)
    stmts = list(statements(functions()["ImporterFunction"]))
    writes = {
        str(r)
        for s in stmts
        if "s3:PutObject" in as_list(s["Action"])
        for r in as_list(s["Resource"])
    }
    assert str({"Fn::Sub": "${DataBucket.Arn}/t/*/uploads/*"}) in writes
    deletes = [s for s in stmts if "s3:DeleteObject" in as_list(s["Action"])]
    # it removes what it consumed: uploads, and the inline archives task import jobs keep
    assert [s["Resource"] for s in deletes] == [
        [
            {"Fn::Sub": "${DataBucket.Arn}/t/*/uploads/*"},
            {"Fn::Sub": "${DataBucket.Arn}/t/*/jobs/*"},
        ]
    ]


def test_failed_import_events_are_retried_then_dead_lettered_and_swept(
    transformed: dict[str, Any],
) -> None:
    res = transformed["Resources"]
    importer = "ImporterFunction"
    # Lambda retries a failed worker twice, then the event goes to the dead-letter queue
    [config] = [r for r in res.values() if r["Type"] == "AWS::Lambda::EventInvokeConfig"]
    assert config["Properties"]["FunctionName"] == {"Ref": importer}
    assert config["Properties"]["MaximumRetryAttempts"] == 2
    fn = res[importer]["Properties"]
    assert fn["DeadLetterConfig"] == {"TargetArn": {"Fn::GetAtt": ["ImportDeadLetterQueue", "Arn"]}}
    # An event EventBridge cannot deliver lands there too, which its queue policy allows
    rules = [r["Properties"] for r in res.values() if r["Type"] == "AWS::Events::Rule"]
    [s3_rule] = [r for r in rules if "EventPattern" in r]
    assert s3_rule["Targets"][0]["DeadLetterConfig"] == {
        "Arn": {"Fn::GetAtt": ["ImportDeadLetterQueue", "Arn"]}
    }
    policy = res["ImportDeadLetterQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert policy[0]["Principal"] == {"Service": "events.amazonaws.com"}
    # The sweep runs on a schedule and reaches the same function
    schedules = [r for r in rules if "ScheduleExpression" in r]
    [sweep] = [r for r in schedules if r["Targets"][0]["Arn"] == {"Fn::GetAtt": [importer, "Arn"]}]
    assert sweep["ScheduleExpression"] == "rate(1 minute)"
    # It sends a queued job again to the import queue, and the parts of a job read whose
    # workers stopped to the export queue (besides its dead-letter queue)
    env = fn["Environment"]["Variables"]
    assert env["CASESHELF_IMPORT_QUEUE_URL"] == {"Ref": "ImportJobQueue"}
    assert env["CASESHELF_EXPORT_QUEUE_URL"] == {"Ref": "ExportQueue"}
    sent = sorted(r for a, r in role_grants(transformed, importer) if a == "sqs:SendMessage")
    assert sent == [
        str({"Fn::GetAtt": ["ExportQueue", "Arn"]}),
        str({"Fn::GetAtt": ["ImportDeadLetterQueue", "Arn"]}),
        str({"Fn::GetAtt": ["ImportJobQueue", "Arn"]}),
    ]
    # And an alarm watches the queue
    alarm = res["ImportDeadLetterAlarm"]["Properties"]
    assert alarm["Namespace"] == "AWS/SQS"
    assert alarm["Dimensions"][0]["Value"] == {"Fn::GetAtt": ["ImportDeadLetterQueue", "QueueName"]}


def test_every_function_logs_with_retention() -> None:
    groups = resources("AWS::Logs::LogGroup").values()
    named = {str(g["Properties"]["LogGroupName"]) for g in groups}
    for name in functions():
        expected = str({"Fn::Sub": f"/aws/lambda/${{{name}}}"})
        assert expected in named, f"{name} has no log group"
    assert groups
    for group in groups:
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}


def test_an_alarm_watches_the_apis_5xx() -> None:
    alarms = [
        a["Properties"]
        for a in resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == "5XXError"
    ]
    assert alarms, "no alarm on 5xx"
    api = load_template()["Resources"]["Api"]["Properties"]
    [alarm] = alarms
    assert alarm["Namespace"] == "AWS/ApiGateway"
    assert {"Name": "ApiName", "Value": api["Name"]} in alarm["Dimensions"]


READ_PREFIXES = ("Get", "List", "Describe", "Query", "Scan", "BatchGet")


def role_grants(transformed: dict[str, Any], function: str) -> list[tuple[str, str]]:
    """(action, resource) pairs of a function's role as deployed (SAM policy templates
    expanded); a resource is its `Fn::Sub` text."""
    role = transformed["Resources"][f"{function}Role"]["Properties"]
    out = []
    for policy in role.get("Policies") or []:
        for stmt in policy["PolicyDocument"]["Statement"]:
            assert stmt["Effect"] == "Allow"
            for action in as_list(stmt["Action"]):
                for res in as_list(stmt["Resource"]):
                    sub = res.get("Fn::Sub", res) if isinstance(res, dict) else res
                    text = sub[0] if isinstance(sub, list) else sub
                    out.append((action, text if isinstance(text, str) else str(res)))
    return out


def writes(grants: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(a, r) for a, r in grants if not a.split(":", 1)[1].startswith(READ_PREFIXES)]


def test_the_diff_function_only_reads(transformed: dict[str, Any]) -> None:
    grants = role_grants(transformed, "DiffFunction")
    assert {a for a, _ in grants} >= {"s3:GetObject", "dynamodb:Query"}
    assert writes(grants) == []


def test_the_export_function_writes_only_under_exports(transformed: dict[str, Any]) -> None:
    grants = role_grants(transformed, "ExportFunction")
    assert {a for a, _ in grants} >= {"s3:GetObject", "s3:ListBucket", "dynamodb:Query"}
    written = writes(grants)
    objects = {(a, r) for a, r in written if a.startswith("s3:")}
    assert objects == {
        ("s3:PutObject", "${DataBucket.Arn}/t/*/exports/*"),
        ("s3:PutObjectTagging", "${DataBucket.Arn}/t/*/exports/*"),
    }
    others = {a: r for a, r in written if not a.startswith("s3:")}
    assert set(others) == {"dynamodb:PutItem", "sqs:SendMessage"}
    assert "ExportQueue" in others["sqs:SendMessage"]


def test_the_export_worker_writes_only_under_exports_and_the_job_item(
    transformed: dict[str, Any],
) -> None:
    grants = role_grants(transformed, "ExportWorkerFunction")
    written = {(a, r) for a, r in writes(grants) if not a.startswith("sqs:")}
    assert {r for a, r in written if a.startswith("s3:")} == {"${DataBucket.Arn}/t/*/exports/*"}
    assert {a for a, _ in written} == {
        "s3:PutObject",
        "s3:PutObjectTagging",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
    }
    # Its sweep sends parts again to the export queue, and runs every minute
    sent = {r for a, r in writes(grants) if a.startswith("sqs:")}
    assert sent and all("ExportQueue" in str(r) and "DeadLetter" not in str(r) for r in sent)
    rules = [r["Properties"] for r in transformed["Resources"].values()]
    [sweep] = [
        r
        for r in rules
        if "ScheduleExpression" in r
        and r["Targets"][0]["Arn"] == {"Fn::GetAtt": ["ExportWorkerFunction", "Arn"]}
    ]
    assert sweep["ScheduleExpression"] == "rate(1 minute)"


def test_the_export_queue_outlives_its_worker_and_dead_letters_after_its_retries(
    transformed: dict[str, Any],
) -> None:
    from caseshelf.domain.export_parts import WORKER_MEMORY_MB, WORKER_TIMEOUT_SECONDS
    from caseshelf.functions import QUEUES

    res = transformed["Resources"]
    worker = res["ExportWorkerFunction"]["Properties"]
    assert worker["Timeout"] == WORKER_TIMEOUT_SECONDS
    assert worker["MemorySize"] == WORKER_MEMORY_MB
    for spec in QUEUES:
        props = res[spec.name]["Properties"]
        assert props["VisibilityTimeout"] > worker["Timeout"]
        redrive = props.get("RedrivePolicy")
        if spec.dead_letter is None:
            assert redrive is None
            continue
        assert redrive["maxReceiveCount"] == spec.max_receive_count
        assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [spec.dead_letter, "Arn"]}
    mappings = [
        r["Properties"] for r in res.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"
    ]
    assert mappings and all(m["BatchSize"] == 1 for m in mappings)


def test_the_subset_function_only_starts_jobs_and_writes_no_object(
    transformed: dict[str, Any],
) -> None:
    # register_as is the importer's work: the route puts the job's item and queues it
    written = writes(role_grants(transformed, "SubsetFunction"))
    assert not [a for a, _ in written if "Delete" in a or a.startswith("s3:")]
    assert {a for a, _ in written} == {"dynamodb:PutItem", "sqs:SendMessage"}
    env = transformed["Resources"]["SubsetFunction"]["Properties"]["Environment"]["Variables"]
    assert env["CASESHELF_IMPORT_QUEUE_URL"] == {"Ref": "ImportJobQueue"}


def test_a_ui_on_another_origin_is_one_parameter_for_preflights_and_answers() -> None:
    # Given the template's UiOrigin parameter (empty by default: no other origin)
    doc = load_template()
    param = doc["Parameters"]["UiOrigin"]
    assert param["Default"] == ""
    pattern = re.compile(param["AllowedPattern"])
    assert pattern.fullmatch("https://ui.example.org") and pattern.fullmatch("")
    assert not pattern.fullmatch("*") and not pattern.fullmatch("https://x.org/path")
    # Preflights answer that origin (API Gateway's mock), without the authorizer
    api = doc["Resources"]["Api"]["Properties"]
    assert api["Cors"]["AllowOrigin"] == {"Fn::Sub": "'${UiOrigin}'"}
    assert api["Auth"]["AddDefaultAuthorizerToCorsPreflight"] is False
    assert "Authorization" in api["Cors"]["AllowHeaders"]
    # And every function reads the same origin for its answers' headers
    env = doc["Globals"]["Function"]["Environment"]["Variables"]
    assert env["CASESHELF_CORS_ORIGINS"] == {"Ref": "UiOrigin"}
    # A binary file body is sent as bytes to a client that accepts them
    assert api["BinaryMediaTypes"] == ["application~1octet-stream"]


def test_the_kept_stats_lie_in_an_area_the_lifecycle_expires() -> None:
    from caseshelf.services.browse import stats_key

    key = stats_key("acme", "sha256:" + "0" * 64)
    assert key.startswith(layout.root("acme")) and area_of(key) == "exports"
