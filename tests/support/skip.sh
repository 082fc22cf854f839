# shellcheck shell=bash
# The one way a shell test skips (docs/testing.md). Source it and call
#   test_skip REASON
# which prints "SKIPPED: REASON", writes the test's XML ($XML_OUTPUT_FILE, which Bazel sets) with one
# skipped case, so tools/test counts the skip as gtest's own are counted, and exits 0. Under
# CI=true, tools/test fails a run with any skip that docs/testing.md does not list.

test_skip() {
  local reason="$*" name=${TEST_TARGET:-$0}
  echo "SKIPPED: $reason"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    reason=$(printf '%s' "$reason" | sed 's/&/\&amp;/g; s/</\&lt;/g; s/>/\&gt;/g; s/"/\&quot;/g')
    name=$(printf '%s' "$name" | sed 's/&/\&amp;/g; s/</\&lt;/g; s/>/\&gt;/g; s/"/\&quot;/g')
    cat > "$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="1" failures="0" errors="0">
  <testsuite name="$name" tests="1" failures="0" errors="0" skipped="1">
    <testcase name="$name" status="run" result="skipped"><skipped message="$reason"/></testcase>
  </testsuite>
</testsuites>
XML
  fi
  exit 0
}
