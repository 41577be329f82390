#!/bin/sh
# The timeline picture (dcp_plan_svg) at 64 to 1,024 ranks: every rank labelled (a rank, or a
# range of ranks beside a bracket), every microbatch end labelled with no two numbers
# overlapping, every box number inside its box (left out, never clipped, where it does not
# fit), no text outside the canvas, a note on what gaps mean; then rendered to PNG where a
# rasteriser (rsvg-convert, or Python's cairosvg) is installed, which must give a picture of
# the declared size that is not blank. Text widths are measured with DejaVu Sans' digit
# advance (0.636 em), the widest of the fonts a renderer picks for sans-serif. Ends with
# "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
plan=build/dcp-plan
work=build/svg-test
rm -rf "$work" && mkdir -p "$work"
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "skip the SVG checks: $PYTHON not found"
    echo "1 skipped"
    echo "0 passed, 0 failed"
    exit 0
fi

# name: dcp-plan arguments (seed 1). 54 microbatches on 64 ranks need three bands of numbers.
cat >"$work/cases" <<'CASES'
ranks-64-many-microbatches --lognormal 2000,1.2,64,16000,3000 --ranks 64 --max-tokens-per-rank 2048
ranks-64-long-context --lognormal 16384,1.0,512,131072,256 --ranks 64 --max-tokens-per-rank 16384
ranks-256-dense --lognormal 8192,1.1,256,65536,1500 --ranks 256 --max-tokens-per-rank 8192 --sync-ranks 1
ranks-1024 --lognormal 4096,1.1,1024,8192,4000 --ranks 1024 --max-tokens-per-rank 4096 --sync-ranks 1
ranks-64-compare --lognormal 2000,1.2,64,16000,1500 --ranks 64 --max-tokens-per-rank 2048 --compare
CASES
while read -r name args; do
    # shellcheck disable=SC2086
    if "$plan" $args --svg "$work/$name.svg" --json >"$work/$name.json" 2>"$work/err" &&
        "$PYTHON" - "$work/$name.svg" "$work/$name.json" >"$work/checked" <<'PY'
import json, re, sys, xml.dom.minidom
DIGIT = 0.636   # DejaVu Sans' digit advance in em
CHAR = 0.62     # its average advance of letters and digits, for the other labels
svg = xml.dom.minidom.parse(sys.argv[1]).documentElement
plan = json.load(open(sys.argv[2]))
width, height = float(svg.getAttribute("width")), float(svg.getAttribute("height"))
texts = svg.getElementsByTagName("text")

def box(t):
    """Estimated extent of a text element: (left, right, top, bottom)."""
    s, size = t.firstChild.data, float(t.getAttribute("font-size"))
    w = sum(DIGIT if c.isdigit() else CHAR for c in s) * size
    x, y = float(t.getAttribute("x")), float(t.getAttribute("y"))
    anchor = t.getAttribute("text-anchor") or "start"
    left = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
    return left, left + w, y - 0.76 * size, y + 0.24 * size

for t in texts:
    l, r, top, bottom = box(t)
    assert l >= 0 and r <= width and top >= 0 and bottom <= height, ("outside", t.toxml())

# every microbatch end of every panel: a line with its hover title and a number, no overlap
ends = [t for t in texts if t.getAttribute("font-size") == "9" and t.getAttribute("fill") == "#333"]
titles = [t.firstChild.data for t in svg.getElementsByTagName("title")]
panels = sum(1 for t in titles if t.startswith("lower bound"))
k = sum(1 for t in titles if re.match(r"microbatch \d+ ends at", t))
assert len(ends) == k, (len(ends), k)
if panels == 1:
    assert k == plan["num_microbatches"], (k, plan["num_microbatches"])
    assert sorted(int(t.firstChild.data) for t in ends) == list(range(k))
spans = [box(t) for t in ends]
for i, a in enumerate(spans):
    for b in spans[i + 1:]:
        overlap = a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]
        assert not overlap, ("end numbers overlap", a, b)

# every box number inside its box
nodes = [n for n in svg.childNodes if n.nodeType == n.ELEMENT_NODE]
numbers = 0
for previous, node in zip(nodes, nodes[1:]):
    if node.tagName == "text" and node.getAttribute("fill") == "white":
        assert previous.tagName == "rect", node.toxml()
        x, y = float(previous.getAttribute("x")), float(previous.getAttribute("y"))
        w, h = float(previous.getAttribute("width")), float(previous.getAttribute("height"))
        l, r, top, bottom = box(node)
        assert x <= l and r <= x + w and y <= top and bottom <= y + h, ("clipped", node.toxml())
        numbers += 1

# every rank labelled exactly once, labels apart
ranks = plan["config"]["ranks"]
labels = [t for t in texts if t.getAttribute("font-size") == "10" and
          t.getAttribute("text-anchor") == "end"]
covered = []
for t in labels:
    m = re.fullmatch(r"rank (\d+)|(\d+)-(\d+)", t.firstChild.data)
    assert m, t.firstChild.data
    first, last = (int(m.group(1)),) * 2 if m.group(1) else (int(m.group(2)), int(m.group(3)))
    covered += range(first, last + 1)
assert sorted(covered) == sorted(list(range(ranks)) * panels), "every rank once per panel"
ys = sorted(float(t.getAttribute("y")) for t in labels)
assert all(b - a >= 10 for a, b in zip(ys, ys[1:]) if b - a < 100), "rank labels overlap"
assert any("gap in a row" in t.firstChild.data for t in texts)
print(f"{k} microbatch ends, {numbers} box numbers, {len(labels)} rank labels, {panels} panels")
PY
    then
        pass "$name: $(cat "$work/checked")"
    else
        fail "$name: labels"
    fi
done <"$work/cases"

# To PNG, where a rasteriser exists: the declared size, and not blank.
render=""
if command -v rsvg-convert >/dev/null 2>&1; then
    render="rsvg-convert"
elif "$PYTHON" -c "import cairosvg" >/dev/null 2>&1; then
    render="cairosvg"
fi
if [ -z "$render" ]; then
    echo "skip rendering to PNG: neither rsvg-convert nor Python's cairosvg is installed"
    echo "1 skipped"
else
    for svg in "$work"/*.svg; do
        png="${svg%.svg}.png"
        if [ "$render" = rsvg-convert ]; then
            rsvg-convert "$svg" -o "$png" 2>"$work/err"
        else
            "$PYTHON" -c "import cairosvg, sys; cairosvg.svg2png(url=sys.argv[1], write_to=sys.argv[2])" \
                "$svg" "$png" 2>"$work/err"
        fi
        if [ -s "$png" ] && "$PYTHON" - "$svg" "$png" <<'PY'
import struct, sys, xml.dom.minidom, zlib
svg = xml.dom.minidom.parse(sys.argv[1]).documentElement
data = open(sys.argv[2], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n"
width, height = struct.unpack(">II", data[16:24])
assert (width, height) == (round(float(svg.getAttribute("width"))),
                           round(float(svg.getAttribute("height")))), (width, height)
chunks, at = [], 8
while at < len(data):
    length, kind = struct.unpack(">I4s", data[at:at + 8])
    if kind == b"IDAT":
        chunks.append(data[at + 8:at + 8 + length])
    at += 12 + length
pixels = zlib.decompress(b"".join(chunks))
assert len(set(pixels)) > 16, "a blank picture"
PY
        then
            pass "$(basename "$png") rendered by $render"
        else
            fail "$(basename "$png") rendered by $render ($(head -c 300 "$work/err"))"
        fi
    done
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
