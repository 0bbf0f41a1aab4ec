#!/usr/bin/env bash
# The terminal client as the official conformance suite's client (`cargo xtask
# conformance-client`): the suite runs this with the scenario's server URL as the last
# argument, the scenario in MCP_CONFORMANCE_SCENARIO and the spec version in
# MCP_CONFORMANCE_PROTOCOL_VERSION; MCPR_BIN is the binary under test.
set -euo pipefail
url="${!#}"
bin="${MCPR_BIN:-mcp-resources}"
protocol=legacy
if [ "${MCP_CONFORMANCE_PROTOCOL_VERSION:-}" = 2026-07-28 ]; then
  protocol=2026-07-28
fi
client() { "$bin" "$@" --protocol "$protocol" --timeout 20 --url "$url"; }
case "${MCP_CONFORMANCE_SCENARIO:-}" in
  # The scenario's tool adds two numbers; it checks they arrive as numbers.
  tools_call) client call add_numbers --arg a:=5 --arg b:=3 ;;
  # The tool's answer stream closes after a priming event with retry: 500; the client must
  # wait that long and GET with Last-Event-ID for the answer.
  sse-retry) client call test_reconnection ;;
  # SEP-2243: Mcp-Method on every POST (initialize and its notification included, so one
  # legacy handshake too) and Mcp-Name on tools/call, resources/read and prompts/get.
  http-standard-headers)
    protocol=legacy client info
    client tools
    client call my-hyphenated-tool
    client ls
    client cat --json 'file:///path/to/file%20name.txt'
    client prompts
    client prompt test_prompt
    ;;
  # SEP-2106: listing tools does not fetch a network $ref of their schemas.
  json-schema-ref-no-deref) client tools ;;
  # SEP-1613/2106: the focal tool's inputSchema, as `tools --json` prints it (as the server
  # sent it), passed back verbatim to the echo tool.
  json-schema-2020-12-preservation)
    schema="$(client tools --json | python3 -c '
import json, sys
for line in sys.stdin:
    tool = json.loads(line)
    if tool["name"] == "json_schema_2020_12_tool":
        print(json.dumps({"schema": tool["inputSchema"]}))
')"
    client call json_schema_echo --args-json "$schema"
    ;;
  # SEP-2640: listing alone reads no skill file.
  sep-2640-client-no-prefetch) client skills ;;
  # SEP-2640: a pull verifies SKILL.md first (size, digest, then its frontmatter against the
  # entry) and stops there on a mismatch; the refusal is the expected outcome, and the
  # scenario checks the next file was never read.
  sep-2640-client-verify-*)
    dir="$(mktemp -d)"
    trap 'rm -rf "$dir"' EXIT
    if client skills pull skill://pdf-processing/SKILL.md "$dir"; then
      echo "the pull of a tampered skill succeeded" >&2
      exit 1
    fi
    ;;
  # The rest check the handshake and the requests' headers and _meta: `info` connects and is done.
  *) client info ;;
esac
