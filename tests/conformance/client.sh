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
  # The rest check the handshake and the requests' headers and _meta: `info` connects and is done.
  *) client info ;;
esac
