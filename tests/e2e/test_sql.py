"""db:// through the official client: the quick-start config (examples/mcp-resources.toml)
served over stdio, its SQLite database (examples/app.db, generated from examples/app.sql)
read as a table page in JSON and CSV, through the fixed and the templated named query, with
completion of the template's parameter from the data."""

from __future__ import annotations

import csv
import io
import json

import pytest
from mcp.shared.uri_template import UriTemplate
from mcp_types import ResourceTemplateReference

from conftest import INVALID_PARAMS, REPO, mime_base

pytestmark = pytest.mark.anyio

CONFIG = REPO / "examples" / "mcp-resources.toml"
ACTIVE_IDS = [1, 2, 4, 6]
"""The users with status 'active' in examples/app.sql."""


async def test_example_db_table_and_named_queries(serve, mode):
    async with serve(mode, config=CONFIG) as c:
        listed, _ = await c.list_all()
        uris = {r.uri for r in listed}
        assert {"db://app", "db://app/tables/users", "db://users/active/list"} <= uris

        users = await c.read_one("db://app/tables/users")
        assert mime_base(users.mime_type) == "application/json"
        page = json.loads(users.text)
        assert page["columns"] == ["id", "name", "email", "status", "created_at"]
        assert page["rows"][0][:2] == [1, "Ada Lovelace"]
        assert page["row_count"] == len(page["rows"]) == 8
        assert page["next"] is None

        as_csv = await c.read_one("db://app/tables/users?format=csv")
        assert mime_base(as_csv.mime_type) == "text/csv"
        rows = list(csv.reader(io.StringIO(as_csv.text)))
        assert rows[0] == page["columns"]
        assert [int(r[0]) for r in rows[1:]] == [r[0] for r in page["rows"]]

        active = json.loads((await c.read_one("db://users/active/list")).text)
        assert [r[0] for r in active["rows"]] == ACTIVE_IDS

        # The templated query, expanded the way a client would from the advertised template.
        templates = [t.uri_template for t in await c.templates_all()]
        assert "db://users/{status}/list" in templates
        uri = UriTemplate.parse("db://users/{status}/list").expand({"status": "active"})
        assert [r[0] for r in json.loads((await c.read_one(uri)).text)["rows"]] == ACTIVE_IDS

        ref = ResourceTemplateReference(type="ref/resource", uri="db://users/{status}/list")
        comp = (await c.call(c.client.complete(ref, {"name": "status", "value": "in"}))).completion
        assert comp.values == ["invited"]

        # A value outside the parameter's enum is refused, not run.
        err = await c.error_of(c.client.read_resource("db://users/admin/list"))
        assert err.code == INVALID_PARAMS
