/* otel-bridge viewer: draws every view from one bundle (docs/viewer.md). No network beyond the
   serving page's own data.json and events; the exported file has everything inline. */
(function () {
  "use strict";

  // Okabe-Ito: distinguishable with the common colour-vision deficiencies. Colour is never the
  // only cue: kinds are lanes, grades are written on edges and in the table.
  var KIND_COLOR = {
    agent: "#CC79A7", tool_call: "#E69F00", command: "#B8860B", model: "#009E73",
    span: "#999999", session: "#999999", process: "#0072B2", executable: "#56B4E9",
    file: "#7A7A7A", folded: "#C8C8C8", runtime_reads: "#C8C8C8", endpoint: "#D55E00",
    // typed operations (docs/graph.md): one colour, told apart by label, lane and table
    workflow: "#F0E442", chain: "#F0E442", retrieval: "#F0E442", reranker: "#F0E442",
    guardrail: "#F0E442", evaluator: "#F0E442"
  };
  // A kind this page does not know (a newer graph.json, another layer's kinds) is drawn in this
  // neutral grey, in the "other" lane of its channel, and named in the legend as unstyled.
  var NEUTRAL = "#B4B4B4";
  var GRADE_COLOR = { A: "#0072B2", B: "#56B4E9", C: "#E69F00", D: "#D55E00", U: "#999999" };
  var LANES = [
    { name: "agents", kinds: ["agent"] },
    { name: "tool calls", kinds: ["tool_call", "command"] },
    { name: "models", kinds: ["model"] },
    { name: "spans and other semantic kinds", kinds: ["span", "session", "workflow", "chain", "retrieval", "reranker", "guardrail", "evaluator"] },
    { name: "gateway", kinds: [] },
    { name: "processes", kinds: ["process"] },
    { name: "executables", kinds: ["executable"] },
    { name: "files", kinds: ["file", "folded", "runtime_reads"] },
    { name: "endpoints", kinds: ["endpoint"] },
    { name: "other OS kinds", kinds: [] }
  ];
  var OTHER_SEMANTIC_LANE = 3, OTHER_OS_LANE = 9;
  var SEMANTIC_LANES = 5;
  var READ_RELATIONS = { opened: 1, read: 1 };
  var CROSS_RELATIONS = { correlated_with_process: 1, same_request: 1 };
  var RUNTIME_PATH = /^\/(usr|lib|lib32|lib64|etc|proc|sys|dev|run|snap)\/|\/lib\/python[0-9.]+\/|\/(site|dist)-packages\/|\/__pycache__\/|\/\.venv\/|\.(so(\.[0-9]+)*|pyc)$/;
  var EDGE_PICKING_LIMIT = 5000;
  var GRADE_CELL = 24;  // at most one grade letter per square of this many pixels
  var FILTER_GROUPS = ["kind", "relation", "channel", "grade", "causal"];

  var S = {
    bundle: null, model: null, graph: null, renderer: null, view: "graph",
    off: { kind: {}, relation: {}, channel: {}, grade: {}, causal: {} },
    expanded: {}, search: "", matches: null, selected: null,
    nodeVis: null, edgeVis: null, firstPaintMs: null, lastFilterMs: null,
    version: 0, reviewClaim: null, compareThreshold: 1
  };
  var api = { ready: false };
  window.obViewer = api;

  function $(id) { return document.getElementById(id); }
  function esc(v) {
    return String(v).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function causalName(v) { return v === true ? "true" : v === false ? "false" : v === "mixed" ? "mixed" : "unknown"; }
  function flag(v) { return v === null || v === undefined ? '<span class="unknown">unknown (not stated)</span>' : esc(v); }
  function iso(ns) {
    if (!ns) return '<span class="unknown">unknown</span>';
    return esc(new Date(ns / 1e6).toISOString());
  }
  function arr(v) { return Array.isArray(v) ? v : []; }

  // ---- the bundle's graph in columns (otel_bridge/viewer/columns.py) --------------------------
  // Each field of the nodes (edges) is a column: "values", or a "table" of distinct values with
  // an "index" per row, or (an edge's source/target) "nodes" indices; "absent" lists the rows
  // without that field. Up front only light records with what the model, the filters and the
  // search read; a node's or an edge's whole record is put together when asked for (full()).
  function cellOf(c, i, ids) { return c.index ? c.table[c.index[i]] : c.nodes ? ids[c.nodes[i]] : c.values[i]; }
  function hasCell(c, i) {
    if (!c) return false;
    if (!c.absent) return true;
    if (!c.absentSet) c.absentSet = new Set(c.absent);
    return !c.absentSet.has(i);
  }
  function column(table, name, ids) {
    var c = table.columns[name], out = new Array(table.count);
    for (var i = 0; i < table.count; i++) out[i] = hasCell(c, i) ? cellOf(c, i, ids) : undefined;
    return out;
  }
  function fullRows(table, ids) {
    var cache = new Array(table.count), names = Object.keys(table.columns);
    return function (i) {
      if (cache[i]) return cache[i];
      var o = {};
      names.forEach(function (name) { var c = table.columns[name]; if (hasCell(c, i)) o[name] = cellOf(c, i, ids); });
      return (cache[i] = o);
    };
  }
  function unpackGraph(p) {
    if (!p) return null;
    var nt = p.nodes, et = p.edges, doc = {}, nodes = [], edges = [];
    Object.keys(p.document || {}).forEach(function (k) { doc[k] = p.document[k]; });
    var ids = column(nt, "id", []), kind = column(nt, "kind", ids), label = column(nt, "label", ids),
      key = column(nt, "key", ids), ch = column(nt, "channels", ids), first = column(nt, "first_seen", ids),
      facts = column(nt, "facts", ids);
    for (var i = 0; i < nt.count; i++) {
      nodes.push({ i: i, id: ids[i], kind: kind[i], label: label[i], key: key[i], channels: ch[i],
        first_seen: first[i], facts: facts[i] });
    }
    var eid = column(et, "id", ids), src = column(et, "source", ids), tgt = column(et, "target", ids),
      rel = column(et, "relation", ids), grade = column(et, "grade", ids), causal = column(et, "causal", ids),
      inf = column(et, "inferred", ids), ech = column(et, "channels", ids);
    for (var j = 0; j < et.count; j++) {
      edges.push({ i: j, id: eid[j], source: src[j], target: tgt[j], relation: rel[j], grade: grade[j],
        causal: causal[j], inferred: inf[j], channels: ech[j] });
    }
    doc.nodes = nodes; doc.edges = edges; doc.layout = p.layout || null;
    doc.fullNode = fullRows(nt, ids); doc.fullEdge = fullRows(et, ids);
    return doc;
  }
  // A model node or edge drawn from a graph.json record: its whole record ("raw") on demand.
  function GraphNode(n, doc) { this.ri = n.i; this.doc = doc; }
  Object.defineProperty(GraphNode.prototype, "raw", { get: function () { return this.doc.fullNode(this.ri); } });
  function GraphEdge(e, doc) { this.ri = e.i; this.doc = doc; }
  Object.defineProperty(GraphEdge.prototype, "raw", { get: function () { return this.doc.fullEdge(this.ri); } });

  // ---- model: graph.json -> lanes, folds and edge styles ------------------------------------
  function laneOf(n) {
    if (n.kind !== "agent" && n.kind !== "tool_call" && arr(n.channels).indexOf("gw") >= 0 &&
        arr(n.channels).indexOf("sem") < 0) return 4;
    for (var i = 0; i < LANES.length; i++) if (LANES[i].kinds.indexOf(n.kind) >= 0) return i;
    var ch = arr(n.channels);
    return ch.indexOf("os") >= 0 && ch.indexOf("sem") < 0 ? OTHER_OS_LANE : OTHER_SEMANTIC_LANE;
  }
  function kindColor(kind) { return KIND_COLOR.hasOwnProperty(kind) ? KIND_COLOR[kind] : NEUTRAL; }
  function edgeStyle(e) {
    if (e.viewerOnly) return "dotted";
    if (e.inferred === true || e.inferred === "mixed" || e.grade === "D") return "dashed";
    return "solid";
  }
  function filePath(n) { return (n.facts && n.facts.path) || String(n.id).replace(/^file:/, ""); }

  function foldable(doc) {
    // A file whose only relations are reads by one process, at a library/runtime path. Only such
    // files are tracked (no bookkeeping per node or edge of the rest).
    var kind = {}, cand = {}, folded = {};
    doc.nodes.forEach(function (n) {
      kind[n.id] = n.kind;
      if (n.kind === "file" && RUNTIME_PATH.test(filePath(n))) cand[n.id] = { ok: true, procs: {} };
    });
    doc.edges.forEach(function (e) {
      var asSource = cand[e.source], asTarget = cand[e.target];
      if (asSource) asSource.ok = false;
      if (!asTarget) return;
      if (READ_RELATIONS[e.relation] && kind[e.source] === "process") asTarget.procs[e.source] = 1;
      else asTarget.ok = false;
    });
    Object.keys(cand).forEach(function (id) {
      var r = cand[id], procs = Object.keys(r.procs);
      if (r.ok && procs.length === 1) folded[id] = procs[0];
    });
    return folded;
  }

  // The positions computed when the bundle was built (otel_bridge/viewer/layout.py: the same
  // rules as layout() below), used while no fold is expanded and every node has one.
  function givenLayout(doc, nodes, folds) {
    var L = doc.layout;
    if (!L || Object.keys(S.expanded).length || Object.keys(L.folds).length !== Object.keys(folds).length) return false;
    for (var i = 0; i < nodes.length; i++) {
      var v = nodes[i], p = v.fold ? L.folds[v.fold.process] : null, x = v.fold ? (p ? p[0] : null) : L.x[v.ri];
      if (x === null || x === undefined) return false;
      v.x = x; v.y = v.fold ? p[1] : L.y[v.ri];
    }
    S.laneBands = L.bands;
    return true;
  }
  function buildModel(doc, ownLayout) {
    var nodes = [], edges = [], foldOf = foldable(doc), folds = {}, byId = {};
    doc.nodes.forEach(function (n) {
      var proc = foldOf[n.id];
      if (proc && !S.expanded[proc]) {
        var f = folds[proc] || (folds[proc] = { id: "fold:" + proc, kind: "folded", process: proc,
          count: 0, members: [], channels: ["os"], first_seen: n.first_seen });
        f.count++; f.members.push(n.id);
        if (n.first_seen && (!f.first_seen || n.first_seen < f.first_seen)) f.first_seen = n.first_seen;
        return;
      }
      var v = new GraphNode(n, doc);
      v.id = n.id; v.kind = n.kind; v.label = n.label || n.id; v.lane = laneOf(n); v.key = n.key || "";
      v.channels = arr(n.channels); v.first_seen = n.first_seen; v.folded = !!proc;
      nodes.push(v); byId[v.id] = v;
    });
    Object.keys(folds).forEach(function (p) {
      var f = folds[p];
      var v = { id: f.id, kind: "folded", label: f.count + " library/runtime reads", lane: 7,
        raw: null, key: "", fold: f, channels: f.channels, first_seen: f.first_seen, count: f.count };
      nodes.push(v); byId[v.id] = v;
      edges.push({ id: "viewer:" + f.id, source: p, target: f.id, relation: "reads (folded)",
        grade: "U", causal: null, inferred: null, channels: ["os"], viewerOnly: true, raw: null,
        style: "dotted" });
    });
    doc.edges.forEach(function (e) {
      if (!byId[e.source] || !byId[e.target]) return;
      var v = new GraphEdge(e, doc);
      v.id = e.id; v.source = e.source; v.target = e.target; v.relation = e.relation;
      v.grade = e.grade; v.causal = e.causal; v.inferred = e.inferred; v.channels = arr(e.channels);
      v.style = edgeStyle(e); v.cross = !!CROSS_RELATIONS[e.relation];
      edges.push(v);
    });
    var given = !ownLayout && givenLayout(doc, nodes, folds);
    if (!given) layout(nodes, edges);
    if (given && doc.layout.curves) doc.layout.curves.forEach(function (c) { edges[c[0]].via = [c[1], c[2]]; });
    else route(nodes, edges, S.laneBands);
    corridors(nodes, edges, S.laneBands, byId);
    var bbox = { x0: Infinity, y0: Infinity, x1: -Infinity, y1: -Infinity };
    nodes.forEach(function (n) {
      bbox.x0 = Math.min(bbox.x0, n.x); bbox.x1 = Math.max(bbox.x1, n.x);
      bbox.y0 = Math.min(bbox.y0, n.y); bbox.y1 = Math.max(bbox.y1, n.y);
    });
    if (!nodes.length) bbox = { x0: 0, y0: 0, x1: 1, y1: 1 };
    var foldedCount = 0;
    Object.keys(folds).forEach(function (p) { foldedCount += folds[p].count; });
    return { nodes: nodes, edges: edges, byId: byId, folded: foldedCount, folds: folds, bbox: bbox, givenLayout: given,
      edgeById: edges.reduce(function (m, e) { m[e.id] = e; return m; }, {}) };
  }

  // Layered layout. Every lane spans the same width, so lanes line up. The lanes down to the
  // processes wrap row by row in first_seen order; the lanes below (executables, files,
  // endpoints, other OS kinds) are ordered by where their processes are (the mean x of their
  // neighbours above: barycentre ordering) and fill column by column, so a process's files sit
  // under it: its edges stay short and rarely cross.
  var PROCESS_LANE = 5;
  function layout(nodes, edges) {
    var lanes = LANES.map(function () { return []; }), byId = {}, up = {};
    nodes.forEach(function (n) { lanes[n.lane].push(n); byId[n.id] = n; });
    edges.forEach(function (e) {
      var s = byId[e.source], t = byId[e.target];
      if (!s || !t) return;
      if (s.lane <= PROCESS_LANE && t.lane > PROCESS_LANE) (up[t.id] = up[t.id] || []).push(s);
      else if (t.lane <= PROCESS_LANE && s.lane > PROCESS_LANE) (up[s.id] = up[s.id] || []).push(t);
    });
    var dy = 10, y = 0, width = 600;
    var grid = lanes.map(function (list) {
      var cols = Math.max(1, Math.min(list.length, Math.max(60, Math.ceil(Math.sqrt(list.length * 8)))));
      width = Math.max(width, (cols - 1) * 10);
      return { cols: cols, rows: Math.ceil(list.length / cols) || 0 };
    });
    function byTime(a, b) { return (a.first_seen || Infinity) - (b.first_seen || Infinity) || (a.id < b.id ? -1 : 1); }
    S.laneBands = [];
    lanes.forEach(function (list, i) {
      var g = grid[i], below = i > PROCESS_LANE;
      if (below) {
        list.forEach(function (n) {
          var ns = up[n.id] || [], sum = 0;
          ns.forEach(function (m) { sum += m.x; });
          n.anchor = ns.length ? sum / ns.length : Infinity;
        });
        list.sort(function (a, b) { return a.anchor - b.anchor || byTime(a, b); });
      } else list.sort(byTime);
      var used = below ? Math.ceil(list.length / g.rows) : Math.min(g.cols, list.length);
      list.forEach(function (n, k) {
        var c = below ? Math.floor(k / g.rows) : k % g.cols, r = below ? k % g.rows : Math.floor(k / g.cols);
        n.x = used > 1 ? (c / (used - 1) - 0.5) * width : 0;
        n.y = -(y + r * dy);
      });
      S.laneBands.push({ name: LANES[i].name, y0: -y, y1: -(y + Math.max(g.rows - 1, 0) * dy), n: list.length, semantic: i < SEMANTIC_LANES });
      if (list.length) y += g.rows * dy + 40;
    });
  }

  // An edge whose straight line would pass within CLEARANCE of a node of a one-row lane that is
  // neither of its ends is drawn as a quadratic curve (e.via: its control point), the first of
  // BENDS that clears every such node, else the one passing the fewest. The same rule, order and
  // arithmetic as route() in otel_bridge/viewer/layout.py (a test checks they agree).
  var CLEARANCE = 10, BENDS = [], CURVE_SAMPLES = 16, REACH = 110;
  for (var bend = 1; bend <= 24; bend++) BENDS.push(8 * bend, -8 * bend);  // ±8 .. ±192
  function curvePoints(a, b, via) {
    if (!via) return [[a.x, a.y], [b.x, b.y]];
    var out = [];
    for (var k = 0; k <= CURVE_SAMPLES; k++) {
      var t = k / CURVE_SAMPLES, u = 1 - t;
      out.push([u * u * a.x + 2 * t * u * via[0] + t * t * b.x, u * u * a.y + 2 * t * u * via[1] + t * t * b.y]);
    }
    return out;
  }
  function nearLine(px, py, line) {
    for (var i = 0; i < line.length - 1; i++) {
      var ax = line[i][0], ay = line[i][1], dx = line[i + 1][0] - ax, dy = line[i + 1][1] - ay;
      var l2 = dx * dx + dy * dy, u = l2 ? Math.max(0, Math.min(1, ((px - ax) * dx + (py - ay) * dy) / l2)) : 0;
      var qx = ax + u * dx - px, qy = ay + u * dy - py;
      if (qx * qx + qy * qy <= CLEARANCE * CLEARANCE) return true;
    }
    return false;
  }
  function curveHits(a, b, via, near) {
    var line = curvePoints(a, b, via), hits = 0;
    near.forEach(function (n) { if (n !== a && n !== b && nearLine(n.x, n.y, line)) hits++; });
    return hits;
  }
  function route(nodes, edges, bands) {
    var lines = [], oneRow = {}, byId = {}, blocks = blockLanes(bands);
    bands.forEach(function (b, i) { if (b.n && b.y0 === b.y1) { lines.push(i); oneRow[i] = []; } });
    nodes.forEach(function (n) { byId[n.id] = n; if (oneRow[n.lane]) oneRow[n.lane].push(n); });
    edges.forEach(function (e) {
      var a = byId[e.source], b = byId[e.target];
      e.via = null;
      if (!a || !b || a === b || !oneRow[a.lane] || !oneRow[b.lane]) return;
      if (blocksBetween(blocks, a.lane, b.lane)) return;  // a corridor route (corridors())
      var lo = Math.min(a.y, b.y) - REACH, hi = Math.max(a.y, b.y) + REACH, near = [];
      lines.forEach(function (i) { if (lo <= bands[i].y0 && bands[i].y0 <= hi) near = near.concat(oneRow[i]); });
      var best = curveHits(a, b, null, near), bestVia = null;
      if (!best) return;
      var dx = b.x - a.x, dy = b.y - a.y, length = Math.sqrt(dx * dx + dy * dy);
      if (!length) return;
      for (var k = 0; k < BENDS.length; k++) {
        var h = BENDS[k], via = [(a.x + b.x) / 2 + -dy / length * h, (a.y + b.y) / 2 + dx / length * h];
        var hits = curveHits(a, b, via, near);
        if (hits < best) { best = hits; bestVia = via; }
        if (!hits) break;
      }
      e.via = bestVia;
    });
  }

  // Corridors: an edge with an end in a lane wrapped into a block, or with such a lane between
  // its ends, is a polyline (e.path: waypoints between its ends) crossing each lane on its way
  // vertically through a gap between its columns and each gap between lanes diagonally, PORT
  // from the rows on either side. The same rule and arithmetic as corridors() in layout.py.
  var PORT = 8;
  function blockLanes(bands) {
    var out = [];
    bands.forEach(function (b, i) { if (b.n && b.y0 !== b.y1) out.push(i); });
    return out;
  }
  function blocksBetween(blocks, la, lb) {
    var lo = Math.min(la, lb), hi = Math.max(la, lb);
    for (var i = 0; i < blocks.length; i++) if (lo < blocks[i] && blocks[i] < hi) return true;
    return false;
  }
  // Each lane's distinct node x values, ascending: its columns.
  function laneColumns(nodes, count) {
    var xs = [], out = [];
    for (var i = 0; i < count; i++) xs.push([]);
    nodes.forEach(function (n) { xs[n.lane].push(n.x); });
    xs.forEach(function (list) {
      list.sort(function (p, q) { return p - q; });
      var cols = [];
      for (var k = 0; k < list.length; k++) if (!k || list[k] !== list[k - 1]) cols.push(list[k]);
      out.push(cols);
    });
    return out;
  }
  function nearestColumn(cols, x) {
    var lo = 0, hi = cols.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (cols[mid] < x) lo = mid + 1; else hi = mid; }
    if (lo === cols.length || (lo > 0 && x - cols[lo - 1] <= cols[lo] - x)) return lo - 1;
    return lo;
  }
  function columnSide(cols, j, right) {
    var c = cols[j];
    if (right) return j + 1 < cols.length ? Math.min((c + cols[j + 1]) / 2, c + CLEARANCE) : c + CLEARANCE;
    return j > 0 ? Math.max((cols[j - 1] + c) / 2, c - CLEARANCE) : c - CLEARANCE;
  }
  function laneGap(cols, x) {
    var j = nearestColumn(cols, x), c = cols[j];
    if (Math.abs(x - c) >= CLEARANCE) return x;
    var left = columnSide(cols, j, false), right = columnSide(cols, j, true);
    return Math.abs(right - x) < Math.abs(x - left) ? right : left;
  }
  // The waypoints between node n and its lane's port, pushed onto pts (from n outwards, or
  // inwards when `into`): a stub straight out of a one-row lane, or a hop to the gap beside n's
  // column and the corridor along it.
  function corridorEnd(pts, n, other, band, cols, port, into) {
    if (band.y0 === band.y1) { pts.push(n.x, port); return; }
    var g = columnSide(cols, nearestColumn(cols, n.x), other.x >= n.x);
    if (into) pts.push(g, port, g, n.y); else pts.push(g, n.y, g, port);
  }
  function corridors(nodes, edges, bands, byId) {
    var blocks = blockLanes(bands), lanes = bands.length, cols, routed = [];
    for (var k = 0; k < edges.length; k++) edges[k].path = null;
    if (!blocks.length) return;
    cols = laneColumns(nodes, lanes);
    // routed[la * lanes + lb]: whether an edge between these lanes takes a corridor
    for (var la = 0; la < lanes; la++) {
      for (var lb = 0; lb < lanes; lb++) {
        routed.push(blocks.indexOf(la) >= 0 || blocks.indexOf(lb) >= 0 || blocksBetween(blocks, la, lb));
      }
    }
    for (var j = 0; j < edges.length; j++) {
      var e = edges[j], a = byId[e.source], b = byId[e.target];
      if (!a || !b || a === b || !routed[a.lane * lanes + b.lane]) continue;
      var ba = bands[a.lane], bb = bands[b.lane], down = a.lane < b.lane, pts = [];
      var portA = down ? ba.y1 - PORT : ba.y0 + PORT, portB = down || a.lane === b.lane ? bb.y0 + PORT : bb.y1 - PORT;
      corridorEnd(pts, a, b, ba, cols[a.lane], portA, false);
      for (var i = a.lane + (down ? 1 : -1); a.lane !== b.lane && i !== b.lane; i += down ? 1 : -1) {
        var band = bands[i];
        if (!band.n) continue;
        var mid = (band.y0 + band.y1) / 2, x = a.x + (b.x - a.x) * ((mid - a.y) / (b.y - a.y));
        var g = laneGap(cols[i], x), near = band.y0 + PORT, far = band.y1 - PORT;
        if (down) pts.push(g, near, g, far); else pts.push(g, far, g, near);
      }
      corridorEnd(pts, b, a, bb, cols[b.lane], portB, true);
      e.path = pts;
    }
  }

  function nodeSize(n) {
    return { agent: 9, tool_call: 7, command: 6, model: 7, process: 6, executable: 4, endpoint: 5, folded: 6 }[n.kind] || 3;
  }

  // ---- filters --------------------------------------------------------------------------------
  function values(group) {
    var seen = {};
    if (!S.model) return [];
    if (group === "kind") S.model.nodes.forEach(function (n) { seen[n.kind] = 1; });
    if (group === "channel") S.model.nodes.forEach(function (n) { n.channels.forEach(function (c) { seen[c] = 1; }); });
    S.model.edges.forEach(function (e) {
      if (group === "relation") seen[e.relation] = 1;
      if (group === "grade") seen[e.grade] = 1;
      if (group === "causal") seen[causalName(e.causal)] = 1;
      if (group === "channel") e.channels.forEach(function (c) { seen[c] = 1; });
    });
    return Object.keys(seen).sort();
  }
  function anyOn(list, off) {
    if (!list.length) return true;
    for (var i = 0; i < list.length; i++) if (!off[list[i]]) return true;
    return false;
  }
  function computeVisibility() {
    var nv = new Set(), ev = new Set(), off = S.off;
    S.model.nodes.forEach(function (n) {
      if (!off.kind[n.kind] && anyOn(n.channels, off.channel)) nv.add(n.id);
    });
    S.model.edges.forEach(function (e) {
      if (nv.has(e.source) && nv.has(e.target) && !off.relation[e.relation] && !off.grade[e.grade] &&
          !off.causal[causalName(e.causal)] && anyOn(e.channels, off.channel)) ev.add(e.id);
    });
    S.nodeVis = nv; S.edgeVis = ev;
  }
  function renderFilterControls() {
    var box = $("ob-filter-groups"), html = "";
    FILTER_GROUPS.forEach(function (g) {
      html += '<fieldset><legend>' + esc(g) + "</legend>";
      values(g).forEach(function (v) {
        var id = "f-" + g + "-" + v.replace(/[^a-z0-9_]/gi, "_");
        html += '<label><input type="checkbox" id="' + esc(id) + '" data-group="' + esc(g) +
          '" data-value="' + esc(v) + '"' + (S.off[g][v] ? "" : " checked") + "> " + esc(v) + "</label>";
      });
      html += "</fieldset>";
    });
    box.innerHTML = html;
  }
  function setFilter(group, value, on) {
    var t0 = performance.now();
    if (on) delete S.off[group][value]; else S.off[group][value] = true;
    var box = document.querySelector('input[data-group="' + group + '"][data-value="' + value + '"]');
    if (box) box.checked = on;
    return refreshAll().then(function () { S.lastFilterMs = performance.now() - t0; return S.lastFilterMs; });
  }
  function refreshAll() {
    computeVisibility();
    if (S.renderer && S.view === "graph") syncRenderer();
    if (S.view === "table") renderTable();
    if (S.view === "timeline") renderTimeline();
    return new Promise(function (resolve) { requestAnimationFrame(function () { requestAnimationFrame(resolve); }); });
  }
  function runSearch(text) {
    S.search = text.trim().toLowerCase();
    S.matches = null;
    if (S.search) {
      S.matches = new Set();
      S.model.nodes.forEach(function (n) {
        var key = n.key || "";
        if ((n.label + " " + n.id + " " + key).toLowerCase().indexOf(S.search) >= 0) S.matches.add(n.id);
      });
    }
    $("ob-search-result").textContent = S.matches ? S.matches.size + " matching nodes" : "";
    if (S.renderer) fullRefresh();
    if (S.view === "table") renderTable();
  }

  // ---- graph view (graphology + sigma) ----------------------------------------------------------
  // A full refresh re-reduces and re-uploads every node and edge and rebuilds sigma's label grid;
  // a filter change only re-reduces the items whose visibility changed (sigma's partial refresh,
  // positions untouched). The label grid holds the nodes visible at the last full refresh, so a
  // node hidden then is shown again through a full refresh (its label would be missing otherwise).
  function markFull() {
    var hidden = {};
    S.model.nodes.forEach(function (n) { if (!S.nodeVis.has(n.id)) hidden[n.id] = 1; });
    S.gridHidden = hidden; S.shownNodes = S.nodeVis; S.shownEdges = S.edgeVis;
  }
  function fullRefresh() {
    if (S.rendererKind !== "canvas") markFull();  // the canvas keeps no state between frames
    S.renderer.refresh();
  }
  function syncRenderer() {
    if (!S.shownNodes || S.rendererKind === "canvas") { fullRefresh(); return; }
    var nodes = [], edges = [], full = false, oldN = S.shownNodes, oldE = S.shownEdges;
    S.model.nodes.forEach(function (n) {
      var now = S.nodeVis.has(n.id);
      if (now === oldN.has(n.id)) return;
      nodes.push(n.id);
      if (now && S.gridHidden[n.id]) full = true;
    });
    S.model.edges.forEach(function (e) { if (S.edgeVis.has(e.id) !== oldE.has(e.id)) edges.push(e.id); });
    if (full) { fullRefresh(); return; }
    S.shownNodes = S.nodeVis; S.shownEdges = S.edgeVis;
    if (nodes.length || edges.length) S.renderer.refresh({ partialGraph: { nodes: nodes, edges: edges }, skipIndexation: true });
  }
  function nodeAttrs(n) {
    return { x: n.x, y: n.y, size: nodeSize(n), label: n.label, color: kindColor(n.kind), kind: n.kind };
  }
  function edgeAttrs(e) {
    return { color: GRADE_COLOR[e.grade] || "#999999", size: e.cross ? 2 : 1, type: "arrow", style: e.style, curved: !!(e.via || e.path) };
  }
  // The display rules both renderers apply (sigma as its reducers, the canvas per frame): they
  // change the given attributes in place (sigma hands each call its own copy).
  function reduceNode(id, a) {
    if (!S.nodeVis.has(id)) { a.hidden = true; return a; }
    if (S.matches && !S.matches.has(id)) { a.color = "#E4E4E4"; a.label = ""; }
    if ((S.matches && S.matches.has(id)) || S.selected === id) { a.highlighted = true; a.forceLabel = true; }
    return a;
  }
  function reduceEdge(id, a) {
    // Dashed and dotted edges are the overlay's (drawOverlay); so are routed ones (curves and
    // corridors) over sigma, which draws straight lines only (overlayRoutes()).
    if (!S.edgeVis.has(id) || a.style !== "solid" || (a.curved && overlayRoutes())) a.hidden = true;
    return a;
  }
  // What a node or an edge is drawn as now, whichever renderer draws it.
  function nodeDisplay(n, out) {
    out.x = n.x; out.y = n.y; out.size = nodeSize(n); out.label = n.label; out.color = kindColor(n.kind);
    out.kind = n.kind; out.hidden = false; out.highlighted = false; out.forceLabel = false;
    return reduceNode(n.id, out);
  }
  function edgeDisplay(e, out) {
    out.color = GRADE_COLOR[e.grade] || "#999999"; out.size = e.cross ? 2 : 1; out.type = "arrow";
    out.style = e.style; out.curved = !!(e.via || e.path); out.hidden = false;
    return reduceEdge(e.id, out);
  }
  function changed(old, now) {
    for (var k in now) if (old[k] !== now[k]) return true;
    return false;
  }
  // Live updates touch only what changed: each graphology write costs a renderer event.
  function syncGraph() {
    var g = S.graph, m = S.model, keep = {};
    m.nodes.forEach(function (n) {
      keep[n.id] = 1;
      var a = nodeAttrs(n);
      if (!g.hasNode(n.id)) g.addNode(n.id, a);
      else if (changed(g.getNodeAttributes(n.id), a)) g.mergeNodeAttributes(n.id, a);
    });
    g.forEachNode(function (id) { if (!keep[id]) g.dropNode(id); });
    var keepE = {};
    m.edges.forEach(function (e) {
      keepE[e.id] = 1;
      var a = edgeAttrs(e);
      if (!g.hasEdge(e.id)) g.addEdgeWithKey(e.id, e.source, e.target, a);
      else if (changed(g.getEdgeAttributes(e.id), a)) g.mergeEdgeAttributes(e.id, a);
    });
    g.forEachEdge(function (id) { if (!keepE[id]) g.dropEdge(id); });
  }
  // WebGL where a GPU runs it; where it would run in software (SwiftShader, llvmpipe: most
  // headless and CI machines) or is missing, the page's own Canvas 2D renderer, which costs a
  // filter change tens of milliseconds instead of seconds there. ?renderer=canvas|webgl forces one.
  var SOFTWARE_GL = /swiftshader|llvmpipe|softpipe|software|basic render driver/i;
  function chooseRenderer() {
    var forced = /[?&#]renderer=(canvas|webgl)\b/.exec(location.search + location.hash);
    if (forced) return { kind: forced[1], gl: "not probed (forced)" };
    var gl = null, name = "none";
    try {
      var c = document.createElement("canvas");
      gl = c.getContext("webgl2") || c.getContext("webgl");
    } catch (err) { gl = null; }
    if (!gl) return { kind: "canvas", gl: name };
    var info = gl.getExtension("WEBGL_debug_renderer_info");
    name = String(gl.getParameter(info ? info.UNMASKED_RENDERER_WEBGL : gl.RENDERER));
    var lose = gl.getExtension("WEBGL_lose_context");
    if (lose) lose.loseContext();
    return { kind: SOFTWARE_GL.test(name) ? "canvas" : "webgl", gl: name };
  }
  // The exported file carries graphology and sigma as text (type text/x-ob-library): compiling
  // them cost the first paint a few hundred milliseconds the canvas renderer has no use for.
  // An inline script inserted by the page runs at once, so this is synchronous.
  function loadLibraries() {
    document.querySelectorAll('script[type="text/x-ob-library"]').forEach(function (el) {
      var code = document.createElement("script");
      code.textContent = el.textContent;
      el.parentNode.replaceChild(code, el);
    });
  }
  function initGraph() {
    var choice = chooseRenderer();
    S.rendererKind = choice.kind; S.glRenderer = choice.gl;
    if (choice.kind === "canvas") { initCanvas(); return; }
    loadLibraries();
    S.graph = new graphology.MultiDirectedGraph();
    syncGraph();
    performance.mark("ob:graph");
    try {
      S.renderer = new Sigma(S.graph, $("ob-graph"), {
        renderEdgeLabels: false, defaultEdgeType: "arrow",
        // Edge picking renders every edge a second time; past EDGE_PICKING_LIMIT edges are
        // selected from a node's details or the table instead of by a click on the line.
        enableEdgeEvents: S.model.edges.length <= EDGE_PICKING_LIMIT,
        labelRenderedSizeThreshold: 7, zIndex: true, allowInvalidContainer: true,
        // Sigma hands each reducer its own shallow copy of the attributes: changed in place.
        nodeReducer: reduceNode,
        edgeReducer: reduceEdge
      });
    } catch (err) {
      // WebGL was offered but failed (lost context, blocked): draw on a canvas instead.
      S.graph = null; S.rendererKind = "canvas"; S.glRenderer += " (failed: " + (err && err.message) + ")";
      $("ob-graph").innerHTML = "";
      initCanvas();
      return;
    }
    markFull();  // the constructor rendered every node and edge with the current filters
    S.renderer.on("clickNode", function (ev) { select(ev.node); });
    S.renderer.on("clickEdge", function (ev) { select(ev.edge); });
    // Sigma does not know the overlay's edges (dashed, dotted, routed): a click beside every
    // node and sigma edge looks for one of them.
    S.renderer.on("clickStage", function (ev) { var id = pickEdge(ev.event.x, ev.event.y, 3); if (id) select(id); });
    S.renderer.on("afterRender", drawOverlay);
    drawOverlay();  // the constructor's render ran before this listener
  }
  function initCanvas() {
    performance.mark("ob:graph");
    S.graph = null;
    S.renderer = new window.ObCanvasGraph($("ob-graph"), {
      nodes: function () { return S.model.nodes; },
      edges: function () { return S.model.edges; },
      bbox: function () { return S.model.bbox; },
      display: nodeDisplay, edgeDisplay: edgeDisplay,
      afterRender: drawOverlay, onClick: select, pickEdge: pickEdge
    });
    drawOverlay();  // the constructor's frame was drawn before S.renderer was set
  }
  // Where a model node is on screen (CSS pixels of the graph view), for either renderer.
  function viewportOf(n) {
    return S.rendererKind === "canvas" ? S.renderer.toViewport(n.x, n.y) : S.renderer.graphToViewport({ x: n.x, y: n.y });
  }
  // The canvas renderer's frame or, over sigma, the overlay canvas, ready for the overlay.
  function overlayContext(w, h) {
    var cv = $("ob-overlay"), dpr = window.devicePixelRatio || 1;
    if (S.rendererKind === "canvas") { cv.hidden = true; return S.renderer.ctx; }  // one layer, not two
    if (cv.width !== w * dpr || cv.height !== h * dpr) { cv.width = w * dpr; cv.height = h * dpr; cv.style.width = w + "px"; cv.style.height = h + "px"; }
    var ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    return ctx;
  }
  function drawOverlay() {
    var r = S.renderer, box = $("ob-graph");
    if (!r) return;
    var w = box.clientWidth, h = box.clientHeight, ctx = overlayContext(w, h);
    ctx.font = "12px system-ui, sans-serif";
    S.laneBands.forEach(function (b, i) {
      if (!b.n) return;
      var p = viewportOf({ x: 0, y: b.y0 });
      ctx.fillStyle = b.semantic ? "#6a3d5a" : "#1f4e79";
      ctx.fillText((b.semantic ? "semantic · " : "OS · ") + b.name + " (" + b.n + ")", 6, p.y - 8);
      if (i === SEMANTIC_LANES) { ctx.strokeStyle = "#bbbbbb"; ctx.lineWidth = 1; ctx.beginPath(); ctx.moveTo(0, p.y - 24); ctx.lineTo(w, p.y - 24); ctx.stroke(); }
    });
    // Dashed and dotted edges, and the grade letters of cross-layer and dashed edges. Lines are
    // one pixel wide (Skia draws those as hairlines, many times faster than wider strokes) but
    // for the selected edge; at most one letter per GRADE_CELL square, so that they stay legible.
    var drawn = 0, letters = {}, proj = projector();
    S.model.edges.forEach(function (e) {
      var routed = !!(e.via || e.path);
      if (drawn > OVERLAY_LIMIT || !S.edgeVis.has(e.id) || (e.style === "solid" && !e.cross && (!routed || !overlayRoutes()))) return;
      drawn++;
      ctx.strokeStyle = ctx.fillStyle = GRADE_COLOR[e.grade] || "#999999";
      ctx.lineWidth = e.selected ? 3 : routed && e.cross ? 2 : 1;
      // The canvas renderer draws solid edges, routed or not; sigma draws straight solid ones.
      if (e.style !== "solid" || (routed && overlayRoutes())) {
        var pts = edgePoints(e, proj), b = pts[pts.length - 1], c = pts[pts.length - 2];
        ctx.setLineDash(e.style === "dashed" ? [7, 5] : e.style === "dotted" ? [2, 4] : []);
        ctx.beginPath(); ctx.moveTo(pts[0].x, pts[0].y);
        if (e.via) ctx.quadraticCurveTo(pts[1].x, pts[1].y, b.x, b.y);
        else for (var k = 1; k < pts.length; k++) ctx.lineTo(pts[k].x, pts[k].y);
        ctx.stroke();
        ctx.setLineDash([]);
        if (routed) curveArrow(ctx, c, b, nodeSize(S.model.byId[e.target]));
      }
      // The letter at the middle of the line, of the curve or of the corridor's waypoints.
      if (e.style === "dotted" || (!e.cross && e.style !== "dashed")) return;
      var m = edgeMiddle(e, proj), mx = m.x, my = m.y;
      var cell = Math.floor(mx / GRADE_CELL) + "," + Math.floor(my / GRADE_CELL);
      if (e.style !== "dotted" && (e.cross || e.style === "dashed") && (e.selected || !letters[cell]) && mx > -8 && my > -8 && mx < w + 8 && my < h + 8) {
        letters[cell] = 1;
        ctx.fillStyle = "#ffffff"; ctx.fillRect(mx - 7, my - 8, 14, 14);
        ctx.fillStyle = "#1b1b1b"; ctx.fillText(e.grade, mx - 4, my + 4);
      }
    });
    if (S.firstPaintMs === null && !S.paintPending) {
      // The frame holding the first render is on screen when the next frame starts.
      S.paintPending = true;
      performance.mark("ob:rendered");
      requestAnimationFrame(function () {
        requestAnimationFrame(function () { performance.mark("ob:painted"); S.firstPaintMs = performance.now(); });
      });
    }
  }
  // An edge's drawn points on screen: its ends and, between them, a curve's control point or a
  // corridor's waypoints.
  // Over sigma the overlay draws solid routed edges while there are at most OVERLAY_LIMIT of
  // them (it strokes each on its own); beyond, sigma draws them straight. The canvas renderer
  // draws them itself, routed, at any number.
  var OVERLAY_LIMIT = 3000;
  function overlayRoutes() {
    if (S.rendererKind === "canvas") return false;
    var m = S.model;
    if (m.routedSolid === undefined) {
      m.routedSolid = 0;
      m.edges.forEach(function (e) { if (e.style === "solid" && (e.via || e.path)) m.routedSolid++; });
    }
    return m.routedSolid <= OVERLAY_LIMIT;
  }
  // proj (projector()): graph coordinates to viewport pixels, the transform taken once.
  function projector() {
    if (S.rendererKind !== "canvas") return function (x, y) { return S.renderer.graphToViewport({ x: x, y: y }); };
    var g = $("ob-graph"), t = S.renderer.transform(g.clientWidth, g.clientHeight);
    return function (x, y) { return { x: t.w / 2 + (x - t.cx) * t.k, y: t.h / 2 - (y - t.cy) * t.k }; };
  }
  function edgePoints(e, proj) {
    var a = S.model.byId[e.source], b = S.model.byId[e.target], w = e.via || e.path || [];
    proj = proj || projector();
    var pts = [proj(a.x, a.y)];
    for (var i = 0; i < w.length; i += 2) pts.push(proj(w[i], w[i + 1]));
    pts.push(proj(b.x, b.y));
    return pts;
  }
  // Where the grade letter goes: the middle of the line, of the curve, or of the corridor's
  // middle segment (only the points needed are projected).
  function edgeMiddle(e, proj) {
    var a = S.model.byId[e.source], b = S.model.byId[e.target], p, q;
    if (e.via) {
      p = proj(a.x, a.y); q = proj(b.x, b.y);
      var c = proj(e.via[0], e.via[1]);
      return { x: (p.x + 2 * c.x + q.x) / 4, y: (p.y + 2 * c.y + q.y) / 4 };
    }
    var all = [a.x, a.y].concat(e.path || [], [b.x, b.y]), k = 2 * Math.floor((all.length / 2 - 1) / 2);
    p = proj(all[k], all[k + 1]); q = proj(all[k + 2], all[k + 3]);
    return { x: (p.x + q.x) / 2, y: (p.y + q.y) / 2 };
  }
  // The shown edge drawn within slop pixels (and half its width) of (x, y), of those the
  // canvas renderer's own pick leaves (routed, dashed and dotted edges), or over sigma, of those
  // the overlay draws; the last drawn wins. A curve is measured as CURVE_SAMPLES segments.
  function pickEdge(x, y, slop) {
    var edges = S.model.edges, proj = projector(), canvas = S.rendererKind === "canvas";
    for (var i = edges.length - 1; i >= 0; i--) {
      var e = edges[i];
      if (!S.edgeVis.has(e.id) || (e.style === "solid" && (!(e.via || e.path) || !(canvas || overlayRoutes())))) continue;
      var pts = edgePoints(e, proj), line = pts;
      if (e.via) {
        line = [];
        for (var k = 0; k <= CURVE_SAMPLES; k++) {
          var t = k / CURVE_SAMPLES, u = 1 - t;
          line.push({ x: u * u * pts[0].x + 2 * t * u * pts[1].x + t * t * pts[2].x, y: u * u * pts[0].y + 2 * t * u * pts[1].y + t * t * pts[2].y });
        }
      }
      for (var j = 0; j + 1 < line.length; j++) {
        var a = line[j], b = line[j + 1], dx = b.x - a.x, dy = b.y - a.y, l2 = dx * dx + dy * dy;
        var f = l2 ? Math.max(0, Math.min(1, ((x - a.x) * dx + (y - a.y) * dy) / l2)) : 0;
        if (Math.hypot(a.x + f * dx - x, a.y + f * dy - y) <= (e.cross ? 1 : 0.5) + slop) return e.id;
      }
    }
    return null;
  }
  // A routed edge's arrowhead at its target's rim, along its last bend (control point or
  // waypoint) -> target.
  function curveArrow(ctx, c, b, r) {
    var dx = b.x - c.x, dy = b.y - c.y, len = Math.sqrt(dx * dx + dy * dy);
    if (!len) return;
    var ux = dx / len, uy = dy / len, tx = b.x - ux * r, ty = b.y - uy * r;
    ctx.beginPath(); ctx.moveTo(tx, ty);
    ctx.lineTo(tx - ux * 7 - uy * 3, ty - uy * 7 + ux * 3);
    ctx.lineTo(tx - ux * 7 + uy * 3, ty - uy * 7 - ux * 3);
    ctx.closePath(); ctx.fill();
  }
  function rendererNote() {
    if (S.rendererKind === "webgl") return "drawn with WebGL";
    var gl = S.glRenderer || "";
    return "drawn with Canvas 2D" + (gl === "none" ? " (no WebGL)" : /\(failed/.test(gl) ? " (WebGL failed)" :
      /forced/.test(gl) ? "" : ": WebGL here runs in software");
  }
  function renderLegend() {
    var html = "", present = {};
    (S.model ? S.model.nodes : []).forEach(function (n) { present[n.kind] = 1; });
    Object.keys(KIND_COLOR).forEach(function (k) {
      if (k === "runtime_reads" && !present[k]) return;
      html += '<span data-kind="' + esc(k) + '"><span class="swatch" style="background:' + KIND_COLOR[k] + '"></span>' + esc(k) + "</span>";
    });
    Object.keys(present).sort().forEach(function (k) {
      if (KIND_COLOR.hasOwnProperty(k)) return;
      html += '<span data-kind="' + esc(k) + '" class="unstyled"><span class="swatch" style="background:' + NEUTRAL +
        '"></span>' + esc(k) + ' <span class="muted">(kind without a style)</span></span>';
    });
    html += '<span><span class="ls"></span>observed / exact</span><span><span class="ls dashed"></span>inferred</span>' +
      '<span><span class="ls dotted"></span>viewer-only (folded reads)</span>';
    Object.keys(GRADE_COLOR).forEach(function (g) {
      html += '<span><span class="swatch" style="background:' + GRADE_COLOR[g] + '"></span>grade ' + g + "</span>";
    });
    if (S.rendererKind) html += '<span class="muted" id="ob-renderer" title="' + esc(S.glRenderer || "") + '">' + esc(rendererNote()) + "</span>";
    $("ob-legend").innerHTML = html;
  }

  // ---- details panel ------------------------------------------------------------------------------
  function dl(pairs) {
    return "<dl>" + pairs.map(function (p) { return "<dt>" + esc(p[0]) + "</dt><dd>" + p[1] + "</dd>"; }).join("") + "</dl>";
  }
  function objectRows(obj, nullText) {
    return Object.keys(obj || {}).sort().map(function (k) {
      var v = obj[k];
      var text = v === null ? '<span class="unknown">' + nullText + "</span>" :
        esc(typeof v === "object" ? JSON.stringify(v) : v);
      return [k, text];
    });
  }
  function traceLinks(traceId, spanId) {
    if (!traceId) return "";
    var links = arr(S.bundle.trace_links).map(function (t) {
      var url = t.template.split("{trace_id}").join(encodeURIComponent(traceId)).split("{span_id}").join(encodeURIComponent(spanId || ""));
      if (!/^https?:\/\//.test(url)) return "";
      return '<a href="' + esc(url) + '" target="_blank" rel="noopener noreferrer">open in ' + esc(t.name) + "</a>";
    }).filter(Boolean);
    return links.length ? "<p>" + links.join(" · ") + "</p>" : "";
  }
  function idList(ids) {
    if (!ids || !ids.length) return '<span class="unknown">none recorded</span>';
    return '<ul class="plain">' + ids.map(function (i) { return "<li><code>" + esc(i) + "</code></li>"; }).join("") + "</ul>";
  }
  function select(id) {
    var m = S.model, html, prev = S.selected;
    if (S.selected && m.edgeById[S.selected]) m.edgeById[S.selected].selected = false;
    S.selected = id;
    var n = m.byId[id], e = m.edgeById[id];
    if (n) html = nodeDetails(n);
    else if (e) { e.selected = true; html = edgeDetails(e); }
    else html = '<p class="muted">' + esc(id) + " is not in this view.</p>";
    $("ob-details").innerHTML = html;
    if (S.renderer && S.rendererKind === "canvas") S.renderer.refresh();
    else if (S.renderer && S.shownNodes) {
      // Only the previously and newly selected nodes change (highlight and forced label).
      var changed = [prev, id].filter(function (x) { return x && S.graph.hasNode(x); });
      S.renderer.refresh({ partialGraph: { nodes: changed, edges: [] }, skipIndexation: true });
    }
    document.querySelectorAll("tr.sel").forEach(function (r) { r.classList.remove("sel"); });
    document.querySelectorAll('tr[data-id="' + (window.CSS ? CSS.escape(id) : id) + '"]').forEach(function (r) { r.classList.add("sel"); });
  }
  function incident(id) {
    return S.model.edges.filter(function (e) { return e.source === id || e.target === id; });
  }
  function edgeButtons(list) {
    return '<ul class="plain">' + list.slice(0, 200).map(function (e) {
      var other = e.source === S.selected ? "→ " + e.target : "← " + e.source;
      return '<li><button type="button" class="link" data-select="' + esc(e.id) + '">' + esc(e.relation) +
        " " + esc(other) + "</button> (" + esc(e.grade) + ")</li>";
    }).join("") + (list.length > 200 ? "<li>… " + (list.length - 200) + " more (Table view)</li>" : "") + "</ul>";
  }
  function nodeDetails(n) {
    if (n.fold) {
      return "<h2>Folded reads</h2><p>" + n.count + " library and runtime files read by <code>" + esc(n.fold.process) +
        '</code> and nothing else, folded into one viewer-only node (not in graph.json).</p>' +
        '<button type="button" data-expand="' + esc(n.fold.process) + '">Expand</button>' + idList(n.fold.members.slice(0, 100));
    }
    var r = n.raw, facts = r.facts || {};
    var html = "<h2>" + esc(n.label) + '</h2><p class="muted">' + esc(r.kind) + "</p>" + dl([
      ["id", "<code>" + esc(r.id) + "</code>"], ["key", r.key ? "<code>" + esc(r.key) + "</code>" : '<span class="unknown">none stated</span>'],
      ["channels", esc(arr(r.channels).join(", "))], ["backends", esc(arr(r.backends).join(", "))],
      ["first seen", iso(r.first_seen)], ["last seen", iso(r.last_seen)],
      ["evidence", esc(r.evidence_count) + " observations, " + esc(r.logical_count) + " logical"]
    ]);
    if (n.kind === "process" && S.model.folds[n.id]) {
      html += '<button type="button" data-expand="' + esc(n.id) + '">Fold / expand its library reads</button>';
    }
    if (S.expanded[n.id]) html += '<button type="button" data-collapse="' + esc(n.id) + '">Fold its library reads</button>';
    html += "<h3>Facts</h3>" + (r.facts ? dl(objectRows(facts, "not observed")) : '<p class="unknown">no typed facts stated</p>');
    html += "<h3>Attributes</h3>" + dl(objectRows(r.attrs, "null"));
    html += traceLinks(facts.trace_id || (r.attrs || {}).trace_id, facts.span_id || (r.attrs || {}).span_id);
    html += "<h3>Relations</h3>" + edgeButtons(incident(n.id));
    return html;
  }
  function edgeDetails(e) {
    if (e.viewerOnly) return "<h2>Folded reads</h2><p>A viewer-only edge: it stands for the folded files' read edges.</p>";
    var r = e.raw;
    var html = "<h2>" + esc(r.relation) + '</h2><p class="muted">' + esc(e.style === "solid" ? "observed / exact" : "inferred") + ", grade " + esc(r.grade) + "</p>" + dl([
      ["id", "<code>" + esc(r.id) + "</code>"],
      ["source", '<button type="button" class="link" data-select="' + esc(r.source) + '">' + esc(r.source) + "</button>"],
      ["target", '<button type="button" class="link" data-select="' + esc(r.target) + '">' + esc(r.target) + "</button>"],
      ["grade", esc(r.grade)], ["causal", flag(r.causal)], ["inferred", flag(r.inferred)],
      ["identity exact", flag(r.identity_exact)], ["attribution", esc(arr(r.attribution).join(", ") || "none")],
      ["method", r.method === null ? '<span class="unknown">none</span>' : esc(r.method)],
      ["score", r.score === null ? '<span class="unknown">none</span>' : esc(r.score)],
      ["channels", esc(arr(r.channels).join(", "))], ["backends", esc(arr(r.backends).join(", "))],
      ["first seen", iso(r.first_seen)], ["last seen", iso(r.last_seen)],
      ["evidence", esc(r.evidence_count) + " observations, " + esc(r.logical_count) + " logical"]
    ]);
    html += "<h3>Supporting records</h3>" + (r.support === null ? '<p class="unknown">not retained by this graph</p>' : idList(r.support));
    html += "<h3>Derived from</h3>" + idList(r.derived_support);
    html += "<h3>Attributes</h3>" + dl(objectRows(r.attrs, "null"));
    html += traceLinks((r.attrs || {}).trace_id, (r.attrs || {}).span_id);
    return html;
  }

  // ---- table view -----------------------------------------------------------------------------------
  var sortState = { nodes: ["lane", 1], edges: ["relation", 1] };
  function sortRows(rows, key, dir) {
    return rows.sort(function (a, b) {
      var x = a[key], y = b[key];
      if (x === y) return a.id < b.id ? -1 : 1;
      if (x === undefined || x === null) return 1;
      if (y === undefined || y === null) return -1;
      return (x < y ? -1 : 1) * dir;
    });
  }
  function th(table, key, label) {
    var s = sortState[table], sorted = s[0] === key;
    return '<th scope="col"' + (sorted ? ' aria-sort="' + (s[1] > 0 ? "ascending" : "descending") + '"' : "") +
      '><button type="button" data-sort="' + table + ":" + key + '">' + esc(label) + "</button></th>";
  }
  // The tables fit their pane (fixed layout): the short columns have a width each (class
  // c-NAME, viewer.css), the long ones (label, ids, stable key) share the rest and wrap.
  function cols(names) {
    return "<colgroup>" + names.map(function (n) { return n ? '<col class="c-' + n + '">' : "<col>"; }).join("") + "</colgroup>";
  }
  function renderTable() {
    var m = S.model, vis = S.nodeVis, nodes = m.nodes.filter(function (n) { return vis.has(n.id) && (!S.matches || S.matches.has(n.id)); });
    var rows = nodes.map(function (n) {
      var r = n.raw || {};
      return { id: n.id, kind: n.kind, label: n.label, key: r.key || "", lane: n.lane,
        channels: n.channels.join(", "), first_seen: n.first_seen || null, count: n.fold ? n.count : r.evidence_count };
    });
    sortRows(rows, sortState.nodes[0], sortState.nodes[1]);
    var html = '<div class="section"><table id="ob-node-table"><caption>Nodes: ' + rows.length + " shown" +
      (m.folded ? ", " + m.folded + " library/runtime reads folded into " + Object.keys(m.folds).length + " rows (kind folded)" : "") +
      "</caption>" + cols(["kind", "", "", "", "channels", "seen", "count"]) + "<thead><tr>" + th("nodes", "kind", "kind") + th("nodes", "label", "label") + th("nodes", "id", "id") +
      th("nodes", "key", "stable key") + th("nodes", "channels", "channels") + th("nodes", "first_seen", "first seen") +
      th("nodes", "count", "observations / folded") + "</tr></thead><tbody>";
    html += rows.map(function (r) {
      return '<tr tabindex="0" data-id="' + esc(r.id) + '" data-kind="' + esc(r.kind) + '"' + (r.kind === "folded" ? ' data-count="' + r.count + '"' : "") +
        '><td class="nw">' + esc(r.kind) + '</td><td class="wrap">' + esc(r.label) + '</td><td class="wrap"><code>' + esc(r.id) + '</code></td><td class="wrap">' + esc(r.key) +
        '</td><td>' + esc(r.channels) + '</td><td>' + (r.first_seen ? iso(r.first_seen).replace("T", "<wbr>T") : '<span class="unknown">unknown</span>') + '</td><td class="nw">' + esc(r.count) + "</td></tr>";
    }).join("");
    html += "</tbody></table>";
    var edges = m.edges.filter(function (e) { return S.edgeVis.has(e.id); }).map(function (e) {
      return { id: e.id, source: e.source, target: e.target, relation: e.relation, grade: e.grade,
        causal: causalName(e.causal), style: e.style === "solid" ? "observed/exact" : e.style === "dashed" ? "inferred" : "viewer-only" };
    });
    sortRows(edges, sortState.edges[0], sortState.edges[1]);
    html += '<table id="ob-edge-table"><caption>Edges: ' + edges.length + " shown</caption>" + cols(["relation", "", "", "grade", "causal", "evidence"]) + "<thead><tr>" + th("edges", "relation", "relation") +
      th("edges", "source", "source") + th("edges", "target", "target") + th("edges", "grade", "grade") + th("edges", "causal", "causal") +
      th("edges", "style", "evidence") + "</tr></thead><tbody>";
    html += edges.map(function (r) {
      return '<tr tabindex="0" data-id="' + esc(r.id) + '"><td class="nw">' + esc(r.relation) + '</td><td class="wrap"><code>' + esc(r.source) + '</code></td><td class="wrap"><code>' +
        esc(r.target) + '</code></td><td class="nw">' + esc(r.grade) + '</td><td class="nw">' + esc(r.causal) + '</td><td class="nw">' + esc(r.style) + "</td></tr>";
    }).join("");
    $("view-table").innerHTML = html + "</tbody></table></div>";
  }

  // ---- timeline view -------------------------------------------------------------------------------
  var TIMELINE_KINDS = { agent: 0, tool_call: 1, model: 2, process: 3 };
  function svgEl(tag, attrs, text) {
    var s = "<" + tag;
    Object.keys(attrs).forEach(function (k) { s += " " + k + '="' + esc(attrs[k]) + '"'; });
    return s + ">" + (text ? esc(text) : "") + "</" + tag + ">";
  }
  function failure(n) {
    var r = n.raw, f = r.facts || {}, a = r.attrs || {};
    if (n.kind === "process") {
      if (f.exit_code === null || f.exit_code === undefined) return { text: "exit ?", failed: false };
      return { text: "exit " + f.exit_code, failed: f.exit_code !== 0 };
    }
    var status = String(a["span.status"] || a["otel.status_code"] || "").toLowerCase();
    if (status === "error" || a["error.type"]) return { text: "failed" + (a["error.type"] ? ": " + a["error.type"] : ""), failed: true };
    return null;
  }
  function renderTimeline() {
    var rows = S.model.nodes.filter(function (n) {
      return TIMELINE_KINDS[n.kind] !== undefined && n.raw && S.nodeVis.has(n.id) && n.raw.first_seen;
    }).sort(function (a, b) {
      return TIMELINE_KINDS[a.kind] - TIMELINE_KINDS[b.kind] || a.raw.first_seen - b.raw.first_seen || (a.id < b.id ? -1 : 1);
    });
    var box = $("view-timeline");
    if (!rows.length) { box.innerHTML = '<p class="section">No timed agent, tool call, model or process nodes.</p>'; return; }
    var t0 = Infinity, t1 = -Infinity;
    rows.forEach(function (n) { t0 = Math.min(t0, n.raw.first_seen); t1 = Math.max(t1, n.raw.last_seen || n.raw.first_seen); });
    var W = Math.max(600, (box.clientWidth || 900) - 30), left = 230, rowH = 18, span = Math.max(t1 - t0, 1);
    var H = rows.length * rowH + 40, index = {};
    function X(t) { return left + (t - t0) / span * (W - left - 70); }
    var parts = [];
    for (var k = 0; k <= 4; k++) {
      var tt = t0 + span * k / 4, xx = X(tt);
      parts.push(svgEl("line", { x1: xx, y1: 0, x2: xx, y2: H - 20, stroke: "#e0e0e0" }));
      parts.push(svgEl("text", { x: xx - 20, y: H - 6 }, "+" + ((tt - t0) / 1e6).toFixed(0) + " ms"));
    }
    rows.forEach(function (n, i) {
      index[n.id] = i;
      var y = 10 + i * rowH, r = n.raw, x1 = X(r.first_seen), x2 = Math.max(X(r.last_seen || r.first_seen), x1 + 2);
      var fl = failure(n);
      parts.push('<g data-id="' + esc(n.id) + '" class="tl-row' + (fl && fl.failed ? " failed" : "") + '">' +
        svgEl("text", { x: 4, y: y + 11 }, (n.kind + ": " + n.label).slice(0, 38)) +
        svgEl("rect", { x: x1, y: y + 2, width: x2 - x1, height: rowH - 6, fill: kindColor(n.kind), rx: 2 }) +
        (fl ? svgEl("text", { x: x2 + 4, y: y + 11, fill: fl.failed ? "#b34700" : "#333", "font-weight": fl.failed ? "700" : "400" }, (fl.failed ? "✕ " : "") + fl.text) : "") + "</g>");
    });
    S.model.edges.forEach(function (e) {
      if (!S.edgeVis.has(e.id) || index[e.source] === undefined || index[e.target] === undefined) return;
      if (!e.cross && e.relation !== "spawned") return;
      var tgt = S.model.byId[e.target].raw, x = X(tgt.first_seen);
      var ya = 10 + index[e.source] * rowH + rowH / 2, yb = 10 + index[e.target] * rowH + rowH / 2;
      parts.push(svgEl("line", { x1: x, y1: ya, x2: x, y2: yb, stroke: e.cross ? GRADE_COLOR[e.grade] : "#555555",
        "stroke-width": e.cross ? 2 : 1, "stroke-dasharray": e.style === "dashed" ? "6 4" : "none", "data-edge": e.id, "class": "tl-link" }));
    });
    var table = '<table id="ob-timeline-table"><caption>Timeline rows (the chart above as a table)</caption><thead><tr><th scope="col">kind</th>' +
      '<th scope="col">name</th><th scope="col">start (ms from first)</th><th scope="col">duration (ms)</th><th scope="col">outcome</th></tr></thead><tbody>' +
      rows.map(function (n) {
        var r = n.raw, fl = failure(n);
        return '<tr tabindex="0" data-id="' + esc(n.id) + '"><td>' + esc(n.kind) + "</td><td>" + esc(n.label) + "</td><td>" +
          ((r.first_seen - t0) / 1e6).toFixed(1) + "</td><td>" + (((r.last_seen || r.first_seen) - r.first_seen) / 1e6).toFixed(1) +
          "</td><td" + (fl && fl.failed ? ' class="fail"' : "") + ">" + esc(fl ? fl.text : "") + "</td></tr>";
      }).join("") + "</tbody></table>";
    box.innerHTML = '<div class="section"><svg id="ob-timeline" role="img" aria-label="Timeline of ' + rows.length +
      ' rows; the table below lists them" width="' + W + '" height="' + H + '">' + parts.join("") + "</svg>" + table + "</div>";
  }

  // ---- review view (review.json) ---------------------------------------------------------------
  var STATUS_ORDER = { contradicted: 0, unsupported: 1, partially_supported: 2, supported: 3 };
  function cssEsc(v) { return window.CSS ? CSS.escape(v) : String(v).replace(/["\\]/g, "\\$&"); }
  function relOf(e) { return e.relation || e.kind || e.type || ""; }
  function reviewIndex(rv) {
    var nodes = {}, edges = {}, paths = {}, inbound = {}, outbound = {}, memberOf = {};
    arr(rv.workflow).forEach(function (n) {
      nodes[n.id] = { n: n, level: 0 };
      arr(n.members).forEach(function (m) { memberOf[m] = n.id; });
    });
    arr(rv.evidence).forEach(function (n) { nodes[n.id] = { n: n, level: 1 }; });
    arr(rv.edges).forEach(function (e) {
      if (e.id) edges[e.id] = e;
      (inbound[e.target] = inbound[e.target] || []).push(e);
      (outbound[e.source] = outbound[e.source] || []).push(e);
    });
    arr(rv.paths).forEach(function (p) { if (p && p.id) paths[p.id] = p; });
    return { nodes: nodes, edges: edges, paths: paths, inbound: inbound, outbound: outbound, memberOf: memberOf };
  }
  // A claim's support, as an ordered path: the claim's workflow node, then for each supported
  // evidence node the workflow step and the tool call that produced or used it (review.json's
  // produces/uses edges), then the node itself; artifacts' checked_by runs are listed apart.
  function supportOf(rv, claim) {
    var ix = reviewIndex(rv), hlN = {}, hlE = {}, order = [], checks = [];
    function addNode(id) { if (id && !hlN[id]) { hlN[id] = 1; order.push(id); } }
    function producers(target) {
      arr(ix.inbound[target]).forEach(function (p) {
        var r = relOf(p);
        if (r !== "produces" && r !== "uses") return;
        if (p.id) hlE[p.id] = 1;
        addNode(ix.memberOf[p.source]);
        addNode(p.source);
      });
    }
    function addEdge(id) {
      var e = ix.edges[id];
      if (!e) return;
      hlE[id] = 1;
      if (ix.nodes[e.source]) addNode(e.source);
      if (relOf(e) === "supports") producers(e.target);
      addNode(e.target);
    }
    addNode(ix.memberOf[claim.source]);
    arr(claim.support).forEach(function (s) {
      if (Array.isArray(s)) { s.forEach(addEdge); return; }
      if (ix.edges[s]) addEdge(s);
      else if (ix.paths[s]) { arr(ix.paths[s].edges).forEach(addEdge); arr(ix.paths[s].nodes).forEach(addNode); }
      else if (ix.nodes[s]) addNode(s);
    });
    order.forEach(function (id) {
      arr(ix.outbound[id]).forEach(function (c) {
        if (relOf(c) !== "checked_by") return;
        if (c.id) hlE[c.id] = 1;
        hlN[c.target] = 1;
        checks.push(c.target);
      });
    });
    return { nodes: hlN, edges: hlE, order: order, checks: checks };
  }
  function nodeName(n) { return n.label || n.path || n.text || n.name || (n.phase ? n.phase + " step" : n.id); }
  function nodeKind(n) { return n.kind || n.type || n.phase || ""; }
  function renderReview() {
    var rv = S.bundle.review, box = $("view-review");
    if (!rv) { box.innerHTML = ""; return; }
    var findings = arr(rv.findings), subjects = {};
    findings.forEach(function (f) { subjects[f.subject] = 1; });
    var claims = arr(rv.claims).slice().sort(function (a, b) {
      return (subjects[b.id] ? 1 : 0) - (subjects[a.id] ? 1 : 0) || (STATUS_ORDER[a.status] - STATUS_ORDER[b.status]) || (a.id < b.id ? -1 : 1);
    });
    var html = '<div class="section"><h2>Findings</h2>' + (findings.length ? '<ul id="ob-findings">' + findings.map(function (f) {
      return '<li><span class="badge fail">' + esc(f.kind) + "</span> " + esc(f.message || "") + " <code>" + esc(f.subject || "") + "</code></li>";
    }).join("") + "</ul>" : "<p>None.</p>");
    html += '<h2>Claims</h2>' + (claims.length ? '<ul class="plain claims" id="ob-claims">' + claims.map(function (c) {
      return '<li><button type="button" data-claim="' + esc(c.id) + '" aria-pressed="' + (S.reviewClaim === c.id) + '"><span class="badge st-' + esc(c.status) + '">' +
        esc(String(c.status).replace("_", " ")) + "</span> " + esc(c.text) + "</button></li>";
    }).join("") + "</ul>" : '<p id="ob-claims-none">None: ' + esc(noClaims(rv)) + ' (the findings above still stand).</p>');
    var sel = claims.filter(function (c) { return c.id === S.reviewClaim; })[0], hl = sel ? supportOf(rv, sel) : null;
    html += reviewGraph(rv, hl);
    if (hl) {
      var ix = reviewIndex(rv);
      html += '<h3>Support path of the selected claim</h3><ol id="ob-review-path">' + hl.order.map(function (id) {
        var n = ix.nodes[id] ? ix.nodes[id].n : { id: id };
        return '<li data-id="' + esc(id) + '">' + esc(nodeKind(n)) + " " + esc(nodeName(n)) + "</li>";
      }).join("") + "</ol>";
      html += '<h3>Checked by</h3><ul id="ob-review-checks">' + (hl.checks.length ? hl.checks.map(function (id) {
        var n = ix.nodes[id] ? ix.nodes[id].n : { id: id };
        return '<li data-id="' + esc(id) + '">' + esc(nodeName(n)) + (n.exit_code !== undefined && n.exit_code !== null ? " (exit " + esc(n.exit_code) + ")" : "") + "</li>";
      }).join("") : '<li class="unknown">no check read these artifacts</li>') + "</ul>";
    }
    html += reviewArtifacts(rv) + reviewAudit(rv) + "</div>";
    box.innerHTML = html;
    // A long review scrolls in its box: bring in the node the selected claim's path ends at.
    var end = hl && hl.order.length ? document.querySelector('#ob-review-graph g[data-id="' + cssEsc(hl.order[hl.order.length - 1]) + '"] circle') : null;
    if (end) { var rb = $("ob-review-box"); rb.scrollTop = Math.max(0, Number(end.getAttribute("cy")) - rb.clientHeight / 2); }
  }
  // Why no session has a claim, as review.json's sessions say (each distinct reason once).
  function noClaims(rv) {
    var why = [];
    arr(rv.sessions).forEach(function (s) { if (s.no_claims && why.indexOf(s.no_claims) < 0) why.push(s.no_claims); });
    return why.length ? why.join("; ") : "the agent stated no claim to check";
  }
  // "kind: name", the name cut from the left to at most `chars` characters (a path keeps its
  // file name); the whole name is in the node's tooltip, the path list and the audit table.
  function reviewLabel(n, chars) {
    var name = String(nodeName(n)), kind = nodeKind(n) ? nodeKind(n) + ": " : "";
    var room = Math.max(8, chars - kind.length);
    return kind + (name.length > room ? "…" + name.slice(name.length - room + 1) : name);
  }
  // The review picture fits the pane: workflow steps in a column on the left (labels to their
  // left), evidence nodes in a column on the right (labels to their right), one row each, so
  // every node is labelled and no two labels meet whatever the count; a step sits on the row of
  // its first member. Edges within a column are arcs into the gutter between the columns; a
  // long review grows downwards in a box of its own that scrolls.
  var RV_ROW = 24, RV_TOP = 24, RV_CHAR = 6.6;
  function reviewGeometry(rv) {
    var work = arr(rv.workflow), ev = arr(rv.evidence), row = {}, next = 0, evRow = {};
    var W = Math.max(560, Math.min(1200, ($("view-review").clientWidth || 1000) - 24));
    var WX = Math.round(Math.min(280, W * 0.3)), EX = WX + Math.round(Math.max(110, Math.min(200, W * 0.18)));
    ev.forEach(function (n, i) { evRow[n.id] = i; });
    work.forEach(function (n) {
      var first = Infinity;
      arr(n.members).forEach(function (m) { if (evRow.hasOwnProperty(m)) first = Math.min(first, evRow[m]); });
      row[n.id] = Math.max(next, first === Infinity ? next : first);
      next = row[n.id] + 1;
    });
    var pos = {};
    work.forEach(function (n) { pos[n.id] = { x: WX, y: RV_TOP + row[n.id] * RV_ROW, side: 0 }; });
    ev.forEach(function (n, i) { pos[n.id] = { x: EX, y: RV_TOP + i * RV_ROW, side: 1 }; });
    return { W: W, WX: WX, EX: EX, H: RV_TOP + Math.max(next, ev.length) * RV_ROW, pos: pos,
      wChars: Math.floor((WX - 20) / RV_CHAR), eChars: Math.floor((W - EX - 20) / RV_CHAR) };
  }
  function reviewEdge(G, a, b) {
    var gut = G.EX - G.WX;
    if (a.side !== b.side) {  // across the gutter
      return "M" + a.x + " " + a.y + " C" + (a.x + (a.side ? -gut / 2 : gut / 2)) + " " + a.y + " " + (b.x + (b.side ? -gut / 2 : gut / 2)) + " " + b.y + " " + b.x + " " + b.y;
    }
    // an arc into the gutter, deeper the further apart its ends are
    var bend = Math.min(gut * 0.6, 12 + Math.abs(b.y - a.y) * 0.35) * (a.side ? -1 : 1) / 0.75;
    return "M" + a.x + " " + a.y + " C" + (a.x + bend) + " " + a.y + " " + (b.x + bend) + " " + b.y + " " + b.x + " " + b.y;
  }
  function reviewGraph(rv, hl) {
    var G = reviewGeometry(rv), parts = [];
    arr(rv.edges).forEach(function (e) {
      var a = G.pos[e.source], b = G.pos[e.target];
      if (!a || !b || a === b) return;
      var on = hl && hl.edges[e.id];
      parts.push(svgEl("path", { d: reviewEdge(G, a, b), fill: "none", stroke: "#888", "stroke-dasharray": e.inferred === true ? "6 4" : "none",
        "class": on ? "hl" : hl ? "dim" : "", "data-edge": e.id || "" }));
    });
    [arr(rv.workflow), arr(rv.evidence)].forEach(function (list, side) {
      list.forEach(function (n) {
        var p = G.pos[n.id], on = hl && hl.nodes[n.id], name = String(nodeName(n));
        var text = reviewLabel(n, side ? G.eChars : G.wChars);
        parts.push('<g data-id="' + esc(n.id) + '" class="rv-node' + (on ? " highlighted" : "") + '"><title>' + esc(nodeKind(n) + " " + name) + "</title>" +
          svgEl("circle", { cx: p.x, cy: p.y, r: 7, fill: on ? "#D55E00" : "#56B4E9", "class": on ? "hl" : hl ? "dim" : "" }) +
          svgEl("text", side ? { x: p.x + 12, y: p.y + 4 } : { x: p.x - 12, y: p.y + 4, "text-anchor": "end" }, text) + "</g>");
      });
    });
    return '<h2>Workflow (left) and evidence (right)</h2><div id="ob-review-box"><svg id="ob-review-graph" role="img" aria-label="Workflow and evidence graph; the support path list and the audit table give the same links" width="' +
      G.W + '" height="' + G.H + '" viewBox="0 0 ' + G.W + " " + G.H + '">' + parts.join("") + "</svg></div>";
  }
  function reviewArtifacts(rv) {
    var kinds = { artifact: 1, file: 1, patch: 1, command_output: 1, table: 1, plot: 1 };
    var list = arr(rv.evidence).filter(function (n) { return kinds[n.kind] || n.type === "artifact" || n.path; });
    if (!list.length) return "";
    return "<h2>Artifacts</h2>" + list.map(function (n) {
      var body = n.content !== undefined && n.content !== null ? "<pre>" + esc(n.content) + "</pre>" :
        dl([["sha256", n.sha256 ? "<code>" + esc(n.sha256) + "</code>" : '<span class="unknown">not captured</span>'],
            ["size", n.size !== undefined && n.size !== null ? esc(n.size) + " bytes" : '<span class="unknown">not captured</span>']]);
      return "<h3>" + esc(nodeName(n)) + "</h3>" + body;
    }).join("");
  }
  function reviewAudit(rv) {
    function how(x) {
      if (x.rule || x.method || x.model) return x.rule || x.method || x.model;
      if (arr(x.rules).length) return "rules: " + x.rules.join(", ");
      var rec = arr(x.records);
      return rec.length ? "records: " + rec.slice(0, 3).join(", ") + (rec.length > 3 ? " (+" + (rec.length - 3) + ")" : "") : "";
    }
    var rows = arr(rv.workflow).concat(arr(rv.evidence)).map(function (n) { return ["node", n.id, nodeKind(n), how(n)]; })
      .concat(arr(rv.edges).map(function (e) { return ["edge", e.id || e.source + "→" + e.target, e.kind || e.type || e.relation || "", how(e)]; }));
    return '<h2>Construction audit</h2><table id="ob-audit"><caption>Which rule or model made each node and edge</caption><thead><tr><th scope="col">element</th><th scope="col">id</th><th scope="col">kind</th><th scope="col">made by</th></tr></thead><tbody>' +
      rows.map(function (r) { return "<tr><td>" + esc(r[0]) + "</td><td><code>" + esc(r[1]) + "</code></td><td>" + esc(r[2]) + "</td><td>" + esc(r[3] || "not stated") + "</td></tr>"; }).join("") + "</tbody></table>";
  }

  // ---- compare view (compare.json) -----------------------------------------------------------------
  function idsOf(item) { return Array.isArray(item) ? item : arr(item && (item.nodes || item.members || item.path)); }
  function renderCompare() {
    var cp = S.bundle.compare, box = $("view-compare");
    if (!cp) { box.innerHTML = ""; return; }
    var runs = arr(cp.runs), cov = cp.coverage || {}, tools = arr(cov.tools), matrix = cov.matrix || {};
    var served = S.config.mode === "served";
    var html = '<div class="section"><h2>Runs</h2>' + runMetrics(runs, served);
    var max = 1;
    runs.forEach(function (r) { tools.forEach(function (t) { max = Math.max(max, (matrix[r.id] || {})[t] || 0); }); });
    html += '<h2>Coverage (UpSet)</h2><table class="upset" id="ob-upset"><caption>Tool calls per tool and run</caption><thead><tr><th scope="col">tool</th>' +
      runs.map(function (r) { return '<th scope="col">' + esc(r.id) + "</th>"; }).join("") + "</tr></thead><tbody>" +
      tools.map(function (t) {
        return '<tr><th scope="row">' + esc(t) + "</th>" + runs.map(function (r) {
          var c = (matrix[r.id] || {})[t] || 0;
          return '<td class="cell" style="background:rgba(0,114,178,' + (c ? 0.15 + 0.6 * c / max : 0) + ')">' + (c ? "● " + c : "○") + "</td>";
        }).join("") + "</tr>";
      }).join("") + "</tbody></table>";
    var inter = arr(cov.intersections);
    if (inter.length) {
      html += '<table id="ob-intersections"><caption>Intersections: tools shared by exactly these runs</caption><thead><tr><th scope="col">runs</th><th scope="col">size</th><th scope="col">tools</th></tr></thead><tbody>' +
        inter.map(function (it) {
          var size = it.count !== undefined ? it.count : it.size !== undefined ? it.size : arr(it.tools).length;
          return "<tr><td>" + esc(arr(it.runs).join(" ∩ ")) + '</td><td><span class="swatch" style="border-radius:0;width:' + (4 + 8 * size) + 'px;background:#0072B2"></span> ' + esc(size) + "</td><td>" + esc(arr(it.tools).join(", ")) + "</td></tr>";
        }).join("") + "</tbody></table>";
    }
    html += joinedGraph(cp.joined || {}, runs.length) + "</div>";
    box.innerHTML = html;
  }
  // Per-run metrics: one row per metric, one column per run; a nested object's keys are rows
  // below its own (indented), null is "unknown", a metric a run does not state "not stated".
  function isObj(v) { return v !== null && typeof v === "object" && !Array.isArray(v); }
  function metricRows(values, path, depth, rows) {
    var keys = {};
    values.forEach(function (v) { if (isObj(v)) Object.keys(v).forEach(function (k) { keys[k] = 1; }); });
    Object.keys(keys).sort().forEach(function (k) {
      var vs = values.map(function (v) { return v === null ? null : isObj(v) && Object.prototype.hasOwnProperty.call(v, k) ? v[k] : undefined; });
      var nested = vs.some(isObj);
      rows.push({ path: path.concat([k]), depth: depth, values: vs, nested: nested });
      if (nested) metricRows(vs, path.concat([k]), depth + 1, rows);
    });
    return rows;
  }
  function metricCell(v, nested) {
    if (v === null) return '<td class="unknown">unknown</td>';
    if (v === undefined) return '<td class="unknown">not stated</td>';
    if (isObj(v)) return nested ? "<td></td>" : "<td>" + esc(JSON.stringify(v)) + "</td>";
    if (typeof v === "number") {
      var shown = Number.isInteger(v) ? String(v) : String(Math.round(v * 1000) / 1000);
      return '<td class="num" title="' + esc(String(v)) + '">' + esc(shown) + "</td>";
    }
    return "<td>" + esc(Array.isArray(v) ? v.join(", ") : String(v)) + "</td>";
  }
  function runMetrics(runs, served) {
    var rows = metricRows(runs.map(function (r) { return r.metrics || {}; }), [], 0, []);
    return '<table id="ob-runs"><caption>Per-run metrics (one column per run)</caption><thead><tr><th scope="col">metric</th>' +
      runs.map(function (r) {
        var name = served ? '<a href="run/' + encodeURIComponent(r.id) + '/" data-run="' + esc(r.id) + '">' + esc(r.id) + "</a>" : esc(r.id) + '<br><span class="muted">' + esc(r.path || "") + "</span>";
        return '<th scope="col">' + name + "</th>";
      }).join("") + "</tr></thead><tbody>" +
      rows.map(function (row) {
        return '<tr data-metric="' + esc(row.path.join(".")) + '"><th scope="row" style="padding-left:' + (0.4 + 1.2 * row.depth) + 'rem">' + esc(row.path[row.path.length - 1]) + "</th>" +
          row.values.map(function (v) { return metricCell(v, row.nested); }).join("") + "</tr>";
      }).join("") + "</tbody></table>";
  }
  function joinedGraph(j, nRuns) {
    var nodes = arr(j.nodes), edges = arr(j.edges), t = S.compareThreshold, maxS = 1;
    nodes.forEach(function (n) { maxS = Math.max(maxS, n.support || 0); });
    var motif = {}, detour = {};
    arr(j.motifs).forEach(function (m) { idsOf(m).forEach(function (id) { motif[id] = 1; }); });
    arr(j.detours).forEach(function (d) { idsOf(d).forEach(function (id) { detour[id] = 1; }); });
    var shown = nodes.filter(function (n) { return (n.support || 0) >= t; }), on = {};
    shown.forEach(function (n) { on[n.id] = 1; });
    // Layers: longest path from a source over the shown edges (cycles are cut at revisits).
    var depth = {}, out = {};
    edges.forEach(function (e) { if (on[e.source] && on[e.target]) (out[e.source] = out[e.source] || []).push(e.target); });
    shown.forEach(function (n) { depth[n.id] = depth[n.id] || 0; });
    for (var pass = 0; pass < shown.length; pass++) {
      var moved = false;
      edges.forEach(function (e) {
        if (on[e.source] && on[e.target] && depth[e.target] < depth[e.source] + 1 && depth[e.source] + 1 < shown.length) { depth[e.target] = depth[e.source] + 1; moved = true; }
      });
      if (!moved) break;
    }
    var cols = {}, pos = {};
    shown.forEach(function (n) { var d = depth[n.id]; (cols[d] = cols[d] || []).push(n); });
    Object.keys(cols).forEach(function (d) { cols[d].forEach(function (n, i) { pos[n.id] = { x: 70 + d * 150, y: 40 + i * 60 + (detour[n.id] ? 70 : 0) }; }); });
    var W = 140 + Object.keys(cols).length * 150, H = 80 + Math.max.apply(null, [1].concat(Object.keys(cols).map(function (d) { return cols[d].length; }))) * 60 + 70, parts = [];
    edges.forEach(function (e) {
      var a = pos[e.source], b = pos[e.target];
      if (a && b) parts.push(svgEl("line", { x1: a.x, y1: a.y, x2: b.x, y2: b.y, stroke: "#777", "stroke-width": 1 + 3 * (e.support || 1) / nRuns }));
    });
    shown.forEach(function (n) {
      var p = pos[n.id], cls = detour[n.id] ? "detour" : motif[n.id] ? "motif" : "";
      parts.push('<g data-id="' + esc(n.id) + '" data-support="' + esc(n.support) + '" class="jn ' + cls + '">' +
        svgEl("circle", { cx: p.x, cy: p.y, r: 6 + 10 * (n.support || 0) / Math.max(nRuns, 1), fill: detour[n.id] ? "#D55E00" : motif[n.id] ? "#009E73" : "#56B4E9",
          stroke: "#1b1b1b", "stroke-dasharray": detour[n.id] ? "3 2" : "none" }) +
        svgEl("text", { x: p.x - 40, y: p.y + 28 }, (n.tool || n.id) + " ×" + (n.support || 0) + (detour[n.id] ? " detour" : motif[n.id] ? " motif" : "")) + "</g>");
    });
    return '<h2>Joined graph</h2><label for="ob-support">Minimum support (runs): <output id="ob-support-out">' + t + '</output></label> ' +
      '<input type="range" id="ob-support" min="1" max="' + maxS + '" value="' + t + '">' +
      '<p class="legend"><span><span class="swatch" style="background:#009E73"></span>motif</span><span><span class="swatch" style="background:#D55E00"></span>detour (dashed ring)</span></p>' +
      '<svg id="ob-joined" role="img" aria-label="Joined graph; the table below lists its nodes" width="' + W + '" height="' + H + '">' + parts.join("") + "</svg>" +
      '<table id="ob-joined-table"><caption>Joined nodes at support ≥ ' + t + '</caption><thead><tr><th scope="col">node</th><th scope="col">tool</th><th scope="col">support</th><th scope="col">per run</th><th scope="col">marked</th></tr></thead><tbody>' +
      shown.map(function (n) {
        return '<tr data-id="' + esc(n.id) + '"><td><code>' + esc(n.id) + "</code></td><td>" + esc(n.tool || "") + "</td><td>" + esc(n.support) + "</td><td>" +
          esc(JSON.stringify(n.multiplicity || {})) + "</td><td>" + (detour[n.id] ? "detour" : motif[n.id] ? "motif" : "") + "</td></tr>";
      }).join("") + "</tbody></table>";
  }

  // ---- tabs, events, live updates, boot -----------------------------------------------------------
  function show(view) {
    var was = S.view;
    S.view = view;
    document.querySelectorAll("[role=tab]").forEach(function (b) {
      var on = b.getAttribute("data-view") === view;
      b.setAttribute("aria-selected", on ? "true" : "false");
      b.tabIndex = on ? 0 : -1;
      $("view-" + b.getAttribute("data-view")).hidden = !on;
    });
    if (view === "table") renderTable();
    if (view === "timeline") renderTimeline();
    if (view === "review") renderReview();
    if (view === "compare") renderCompare();
    // The graph is drawn while hidden only by sigma's own events; catch up when it is shown again.
    if (view === "graph" && S.renderer && was !== "graph") { S.renderer.resize(); fullRefresh(); }
  }
  function wire() {
    $("ob-tabs").addEventListener("click", function (ev) {
      var b = ev.target.closest("[role=tab]");
      if (b) show(b.getAttribute("data-view"));
    });
    $("ob-tabs").addEventListener("keydown", function (ev) {
      if (ev.key !== "ArrowRight" && ev.key !== "ArrowLeft") return;
      var tabs = Array.prototype.filter.call(document.querySelectorAll("[role=tab]"), function (b) { return !b.hidden; });
      var i = tabs.indexOf(document.activeElement), next = tabs[(i + (ev.key === "ArrowRight" ? 1 : tabs.length - 1)) % tabs.length];
      next.focus(); show(next.getAttribute("data-view"));
    });
    $("ob-filter-groups").addEventListener("change", function (ev) {
      var t = ev.target;
      if (t.getAttribute("data-group")) setFilter(t.getAttribute("data-group"), t.getAttribute("data-value"), t.checked);
    });
    $("ob-search").addEventListener("input", function (ev) { runSearch(ev.target.value); });
    $("ob-search").addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" && S.matches && S.matches.size) select(S.matches.values().next().value);
    });
    document.body.addEventListener("click", function (ev) {
      var t = ev.target.closest("[data-select],[data-expand],[data-collapse],[data-sort],[data-claim],tr[data-id]");
      if (!t) return;
      if (t.hasAttribute("data-select")) select(t.getAttribute("data-select"));
      else if (t.hasAttribute("data-expand")) { S.expanded[t.getAttribute("data-expand")] = true; rebuild(); select(t.getAttribute("data-expand")); }
      else if (t.hasAttribute("data-collapse")) { delete S.expanded[t.getAttribute("data-collapse")]; rebuild(); select(t.getAttribute("data-collapse")); }
      else if (t.hasAttribute("data-sort")) {
        var p = t.getAttribute("data-sort").split(":"), s = sortState[p[0]];
        sortState[p[0]] = [p[1], s[0] === p[1] ? -s[1] : 1]; renderTable();
      } else if (t.hasAttribute("data-claim")) { S.reviewClaim = t.getAttribute("data-claim"); renderReview(); }
      else if (S.model.byId[t.getAttribute("data-id")] || S.model.edgeById[t.getAttribute("data-id")]) select(t.getAttribute("data-id"));
    });
    document.body.addEventListener("keydown", function (ev) {
      var t = ev.target;
      if (ev.key === "Enter" && t.matches && t.matches("tr[data-id]")) { select(t.getAttribute("data-id")); $("ob-details").focus(); }
    });
    document.body.addEventListener("input", function (ev) {
      if (ev.target.id === "ob-support") { S.compareThreshold = Number(ev.target.value); renderCompare(); $("ob-support").focus(); }
    });
  }
  function rebuild() {
    var doc = S.bundle.graph || { nodes: [], edges: [] };
    S.model = buildModel(doc);
    computeVisibility();
    renderFilterControls();
    if (S.graph) syncGraph();
    if (S.renderer) fullRefresh();
    renderLegend();
    if (S.view !== "graph") show(S.view);
    status();
  }
  function status() {
    var g = S.bundle.graph, text = "";
    if (g) text = S.model.nodes.length + " nodes shown (" + g.nodes.length + " in graph.json, " + S.model.folded + " folded), " + g.edges.length + " edges";
    if (S.bundle.live) text += S.bundle.ended ? " · run ended" : " · live, updating";
    $("ob-status").textContent = text;
  }
  function showTabs(bundle) {
    ["graph", "table", "timeline"].forEach(function (v) { $("tab-" + v).hidden = !bundle.graph; });
    $("ob-filters").hidden = !bundle.graph;
    document.querySelector(".layout").classList.toggle("no-filters", !bundle.graph);
    $("tab-review").hidden = !bundle.review;
    $("tab-compare").hidden = !bundle.compare;
  }
  // The page's bundle carries the graph in columns (graph_columns); the views read bundle.graph.
  function withGraph(bundle) {
    if (bundle.graph === undefined) bundle.graph = unpackGraph(bundle.graph_columns);
    return bundle;
  }
  function applyBundle(bundle) {
    S.bundle = withGraph(bundle);
    $("ob-source").textContent = bundle.source || "";
    showTabs(bundle);
    rebuild();
    S.version += 1;
    api.version = S.version;
  }
  function listen() {
    var pending = false, busy = false;
    function pull() {
      if (busy) { pending = true; return; }
      busy = true;
      fetch("data.json", { cache: "no-store" }).then(function (r) { return r.json(); }).then(function (b) {
        applyBundle(b);
        if (b.ended) es.close();
      }).finally(function () { busy = false; if (pending) { pending = false; pull(); } });
    }
    var es = new EventSource("events");
    es.addEventListener("bundle", pull);
    es.addEventListener("closed", function () { es.close(); S.bundle.ended = true; status(); });
  }
  function boot(bundle) {
    S.bundle = withGraph(bundle);
    performance.mark("ob:boot");
    $("ob-source").textContent = bundle.source || "";
    showTabs(bundle);
    S.model = buildModel(bundle.graph || { nodes: [], edges: [] });
    computeVisibility();
    renderFilterControls();
    renderLegend();
    wire();
    performance.mark("ob:model");
    if (bundle.graph) { initGraph(); renderLegend(); }
    performance.mark("ob:renderer");
    var first = bundle.graph ? "graph" : bundle.review ? "review" : "compare";
    show(first);
    status();
    api.ready = true;
    api.version = S.version = 1;
    if (S.config.mode === "served" && bundle.live && !bundle.ended) listen();
  }
  api.state = S;
  api.setFilter = setFilter;
  api.select = select;
  api.show = show;
  api.search = runSearch;
  api.tableIds = function () {
    return Array.prototype.map.call(document.querySelectorAll("#ob-node-table tbody tr"), function (r) { return r.getAttribute("data-id"); });
  };
  api.nodeIds = function () { return S.model.nodes.map(function (n) { return n.id; }); };
  api.firstPaint = function () { return S.firstPaintMs; };
  // The positions and lane bands in use, and those the page's own layout() gives the same graph.
  api.layouts = function () {
    var bands = S.laneBands, own = buildModel(S.bundle.graph, true), ownBands = S.laneBands;
    S.laneBands = bands;
    function pos(m) { return m.nodes.map(function (n) { return [n.id, n.x, n.y]; }); }
    function curves(m) {
      var out = [];
      m.edges.forEach(function (e, i) { if (e.via) out.push([i, e.source, e.target, e.via[0], e.via[1]]); });
      return out;
    }
    function paths(m) {
      var out = [];
      m.edges.forEach(function (e, i) { if (e.path) out.push([i].concat(e.path)); });
      return out;
    }
    return { given: S.model.givenLayout, used: pos(S.model), bands: bands, own: pos(own), ownBands: ownBands,
      usedCurves: curves(S.model), ownCurves: curves(own), usedPaths: paths(S.model), ownPaths: paths(own) };
  };
  // graph.json's nodes and edges as the page decodes them from the columns (whole records).
  api.records = function () {
    var g = S.bundle.graph;
    if (!g) return null;
    return { nodes: g.nodes.map(function (n) { return g.fullNode(n.i); }),
      edges: g.edges.map(function (e) { return g.fullEdge(e.i); }) };
  };
  // Which renderer draws the graph ("canvas" or "webgl") and the WebGL renderer string probed.
  api.renderer = function () { return { kind: S.rendererKind || null, gl: S.glRenderer || null }; };
  // What a node or an edge is drawn as now (color, size, hidden, ...), for either renderer.
  api.display = function (id) {
    var n = S.model.byId[id], e = S.model.edgeById[id];
    if (S.rendererKind === "webgl" && S.graph) {
      return n ? S.renderer.getNodeDisplayData(id) : S.renderer.getEdgeDisplayData(id);
    }
    return n ? nodeDisplay(n, {}) : e ? edgeDisplay(e, {}) : null;
  };
  // The canvas renderer's last frame: the ids of the nodes and edges it drew.
  api.frame = function () { return S.rendererKind === "canvas" ? S.renderer.frame : null; };
  api.viewportOf = function (id) { return viewportOf(S.model.byId[id]); };
  // An edge's drawn points on screen (ends, control point or waypoints).
  api.edgePoints = function (id) { return edgePoints(S.model.edgeById[id]); };
  api.lastFilter = function () { return S.lastFilterMs; };

  S.config = JSON.parse($("ob-config").textContent);
  var inline = $("ob-bundle");
  performance.mark("ob:script");
  if (inline) boot(JSON.parse(inline.textContent));
  else fetch("data.json", { cache: "no-store" }).then(function (r) { return r.json(); }).then(boot);
})();
