/* otel-bridge viewer: a Canvas 2D renderer for the graph view (docs/viewer.md, "Renderers").

   Used where WebGL would run in software (SwiftShader, llvmpipe: no GPU) or is missing. Every
   frame is one pass over the nodes and edges the page's own display rules let through: edges as
   one stroked path per colour and width, nodes as one filled path per colour, then rings and
   labels; nothing is uploaded, indexed or cached, so a filter change is one redraw. Positions come
   from the page's layout (graph coordinates, y up); the camera fits their bounding box, and the
   wheel and a drag zoom and pan. */
(function () {
  "use strict";

  var PAD = 30;              // pixels between the graph's bounding box and the canvas edge
  var LABEL_MIN_SIZE = 7;    // a node's label shows from this drawn radius up (or when forced)
  var LABEL_CELL = 100;      // at most one unforced label per cell of this many pixels
  var HIT_SLOP = 3;          // pixels around a node or an edge that still select it
  var ARROW_LIMIT = 2000;    // arrowheads only when at most this many edges are on screen
  // Level of detail: with more nodes than this on screen, a node drawn at a radius of at most
  // SQUARE_RADIUS pixels is a square (Skia fills squares about five times faster than circles;
  // at that size and density the two look alike). Below 1.5 px every node is a square.
  var LOD_NODES = 2000, SQUARE_RADIUS = 3.5;
  // Skia fills one path of thousands of closed shapes in time that grows far faster than their
  // number (a path of 13,000 triangles: over a second); paths of this many shapes stay linear.
  var CHUNK = 512;

  // opts: { nodes(): model nodes, edges(): model edges, node(id): model node,
  //         bbox(): {x0, y0, x1, y1}, display(n, out): fills out {hidden, color, size, label,
  //         highlighted, forceLabel}, edgeDisplay(e, out): fills out {hidden, color, size},
  //         afterRender(), onClick(id), pickEdge(x, y, slop): the id of a routed or overlay
  //         edge drawn within slop pixels of (x, y), or null }
  function CanvasGraph(container, opts) {
    this.container = container;
    this.opts = opts;
    this.canvas = document.createElement("canvas");
    this.canvas.style.position = "absolute";
    this.canvas.style.inset = "0";
    this.canvas.setAttribute("aria-hidden", "true");
    container.appendChild(this.canvas);
    // A CPU-backed canvas: where the compositor runs on SwiftShader, an accelerated canvas would
    // send every path through software GPU emulation (seconds per frame at 10,000 nodes).
    this.ctx = this.canvas.getContext("2d", { willReadFrequently: true });
    this.camera = { rx: 0, ry: 0, z: 1 };  // centre's offset from the box's, in box sizes; z = 1 fits
    this.frame = null;                           // what the last frame drew: node and edge ids
    this.ix = null;                              // per-model index (see index())
    this.scheduled = false;
    this.nodeOut = {};
    this.edgeOut = {};
    this.wire();
    this.refresh();
  }

  CanvasGraph.prototype.size = function () {
    var w = this.container.clientWidth, h = this.container.clientHeight;
    var dpr = window.devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(w * dpr) || this.canvas.height !== Math.round(h * dpr)) {
      this.canvas.width = Math.round(w * dpr);
      this.canvas.height = Math.round(h * dpr);
      this.canvas.style.width = w + "px";
      this.canvas.style.height = h + "px";
    }
    return { w: w, h: h, dpr: dpr };
  };
  CanvasGraph.prototype.resize = function () { this.size(); };

  // The transform from graph coordinates to CSS pixels for a canvas of w x h.
  CanvasGraph.prototype.transform = function (w, h) {
    var b = this.opts.bbox(), bw = Math.max(b.x1 - b.x0, 1), bh = Math.max(b.y1 - b.y0, 1);
    var fit = Math.min(Math.max(w - 2 * PAD, 1) / bw, Math.max(h - 2 * PAD, 1) / bh);
    var k = fit * this.camera.z;
    var mx = (b.x0 + b.x1) / 2, my = (b.y0 + b.y1) / 2;
    return { k: k, cx: mx + this.camera.rx * bw, cy: my + this.camera.ry * bh, mx: mx, my: my, w: w, h: h, bw: bw, bh: bh };
  };
  CanvasGraph.prototype.toViewport = function (x, y) {
    var t = this.transform(this.container.clientWidth, this.container.clientHeight);
    return { x: t.w / 2 + (x - t.cx) * t.k, y: t.h / 2 - (y - t.cy) * t.k };
  };

  CanvasGraph.prototype.schedule = function () {
    if (this.scheduled) return;
    this.scheduled = true;
    var self = this;
    requestAnimationFrame(function () { self.scheduled = false; self.refresh(); });
  };

  CanvasGraph.prototype.refresh = function () {
    var s = this.size();
    if (!s.w || !s.h) return;  // the graph view is hidden: drawn again when shown
    var ctx = this.ctx, t = this.transform(s.w, s.h);
    ctx.setTransform(s.dpr, 0, 0, s.dpr, 0, 0);
    ctx.clearRect(0, 0, s.w, s.h);
    var pos = this.project(t, this.camera.z);
    var frame = { nodes: pos.ids, edges: this.drawEdges(ctx, t, pos) };
    this.drawNodes(ctx, pos);
    frame.labels = this.drawLabels(ctx, pos, s);
    this.frame = frame;
    if (this.opts.afterRender) this.opts.afterRender();
  };

  // Index the nodes and edges once per model (positions in typed arrays, edges by node index).
  CanvasGraph.prototype.index = function () {
    var nodes = this.opts.nodes(), edges = this.opts.edges();
    if (this.ix && this.ix.nodes === nodes && this.ix.edges === edges) return this.ix;
    var at = {}, si = new Int32Array(edges.length), ti = new Int32Array(edges.length);
    nodes.forEach(function (n, i) { at[n.id] = i; });
    edges.forEach(function (e, i) {
      si[i] = at[e.source] === undefined ? -1 : at[e.source];
      ti[i] = at[e.target] === undefined ? -1 : at[e.target];
    });
    var n = nodes.length;
    this.ix = { nodes: nodes, edges: edges, si: si, ti: ti, x: new Float64Array(n), y: new Float64Array(n),
      r: new Float64Array(n), shown: new Uint8Array(n), onScreen: new Uint8Array(n), color: new Array(n),
      label: new Array(n), ring: new Uint8Array(n), force: new Uint8Array(n) };
    return this.ix;
  };

  // Screen positions and display values of every node; `ids` and `list` hold (the ids, the
  // indices of) the nodes that are shown and on screen.
  CanvasGraph.prototype.project = function (t, z) {
    var ix = this.index(), nodes = ix.nodes, out = this.nodeOut, ids = [], list = [], sq = Math.sqrt(z);
    for (var i = 0; i < nodes.length; i++) {
      var n = nodes[i];
      this.opts.display(n, out);
      ix.shown[i] = out.hidden ? 0 : 1;
      ix.onScreen[i] = 0;
      if (out.hidden) continue;
      var x = t.w / 2 + (n.x - t.cx) * t.k, y = t.h / 2 - (n.y - t.cy) * t.k, r = out.size * sq;
      ix.x[i] = x; ix.y[i] = y; ix.r[i] = r;
      if (x < -r || y < -r || x > t.w + r || y > t.h + r) continue;
      ix.onScreen[i] = 1;
      ix.color[i] = out.color; ix.label[i] = out.label;
      ix.ring[i] = out.highlighted ? 1 : 0; ix.force[i] = out.forceLabel ? 1 : 0;
      ids.push(n.id);
      list.push(i);
    }
    return { ix: ix, ids: ids, list: list };
  };

  function bucket(map, keys, key) {
    var list = map[key];
    if (!list) { list = map[key] = []; keys.push(key); }
    return list;
  }

  CanvasGraph.prototype.drawEdges = function (ctx, t, pos) {
    var ix = pos.ix, edges = ix.edges, out = this.edgeOut, groups = {}, keys = [], drawn = [];
    var X = ix.x, Y = ix.y, W = t.w, H = t.h;
    for (var i = 0; i < edges.length; i++) {
      var a = ix.si[i], b = ix.ti[i];
      if (a < 0 || b < 0 || !ix.shown[a] || !ix.shown[b]) continue;
      if ((X[a] < 0 && X[b] < 0) || (Y[a] < 0 && Y[b] < 0) || (X[a] > W && X[b] > W) || (Y[a] > H && Y[b] > H)) continue;
      this.opts.edgeDisplay(edges[i], out);
      if (out.hidden) continue;
      bucket(groups, keys, out.color + "|" + out.size).push(i);
      drawn.push(edges[i].id);
    }
    var arrows = drawn.length <= ARROW_LIMIT;
    keys.forEach(function (key) {
      var list = groups[key], sep = key.indexOf("|"), size = Number(key.slice(sep + 1)), heads = [];
      ctx.strokeStyle = ctx.fillStyle = key.slice(0, sep);
      // Skia strokes 1-pixel lines as hairlines, tens of times faster than wider strokes: a wider
      // edge is drawn as parallel hairlines one pixel apart.
      ctx.lineWidth = 1;
      ctx.beginPath();
      for (var j = 0; j < list.length; j++) {
        var e = list[j], p = ix.si[e], q = ix.ti[e], edge = edges[e], from = edge.path || edge.via;
        var fx = from ? bendX(from, t) : X[p], fy = from ? bendY(from, t) : Y[p], dx = X[q] - fx, dy = Y[q] - fy;
        var len = Math.sqrt(dx * dx + dy * dy) || 1, nx = -dy / len, ny = dx / len;
        for (var k = 0; k < size; k++) {
          var off = k - (size - 1) / 2;
          if (from) { routed(ctx, edge, t, X[p], Y[p], X[q], Y[q], off); continue; }
          ctx.moveTo(X[p] + nx * off, Y[p] + ny * off);
          ctx.lineTo(X[q] + nx * off, Y[q] + ny * off);
        }
        if (arrows && len > (from ? ix.r[q] + 4 : 2 * ix.r[q] + 10)) heads.push(e);
      }
      ctx.stroke();
      chunked(ctx, heads.length, function (h) { arrowHead(ctx, ix, heads[h], edges[heads[h]].path || edges[heads[h]].via, t); }, "fill");
    });
    return drawn;
  };

  // A routed edge (docs/viewer.md, "Graph view"): e.via is a quadratic curve's control point,
  // e.path the waypoints of a corridor, both in graph coordinates. Their last point, in CSS
  // pixels, is where the line comes into its target from.
  function bendX(w, t) { return t.w / 2 + (w[w.length - 2] - t.cx) * t.k; }
  function bendY(w, t) { return t.h / 2 - (w[w.length - 1] - t.cy) * t.k; }
  function routed(ctx, e, t, ax, ay, bx, by, off) {
    ctx.moveTo(ax + off, ay + off);
    if (e.via) {
      ctx.quadraticCurveTo(t.w / 2 + (e.via[0] - t.cx) * t.k + off, t.h / 2 - (e.via[1] - t.cy) * t.k + off, bx + off, by + off);
      return;
    }
    for (var i = 0; i < e.path.length; i += 2) {
      ctx.lineTo(t.w / 2 + (e.path[i] - t.cx) * t.k + off, t.h / 2 - (e.path[i + 1] - t.cy) * t.k + off);
    }
    ctx.lineTo(bx + off, by + off);
  }

  // Paths of at most CHUNK shapes: add(i) adds shape i to the current path.
  function chunked(ctx, count, add, paint) {
    for (var start = 0; start < count; start += CHUNK) {
      ctx.beginPath();
      for (var i = start; i < Math.min(count, start + CHUNK); i++) add(i);
      if (paint === "fill") ctx.fill(); else ctx.stroke();
    }
  }

  // The arrowhead of edge e, at the rim of its target node, along the line coming in from its
  // source or, for a routed edge, from its last bend.
  function arrowHead(ctx, ix, e, from, t) {
    var p = ix.si[e], q = ix.ti[e], fx = from ? bendX(from, t) : ix.x[p], fy = from ? bendY(from, t) : ix.y[p];
    var dx = ix.x[q] - fx, dy = ix.y[q] - fy, len = Math.sqrt(dx * dx + dy * dy) || 1;
    var ux = dx / len, uy = dy / len, tipX = ix.x[q] - ux * ix.r[q], tipY = ix.y[q] - uy * ix.r[q], L = 7, W = 3;
    ctx.moveTo(tipX, tipY);
    ctx.lineTo(tipX - ux * L - uy * W, tipY - uy * L + ux * W);
    ctx.lineTo(tipX - ux * L + uy * W, tipY - uy * L - ux * W);
    ctx.closePath();
  }

  CanvasGraph.prototype.drawNodes = function (ctx, pos) {
    var ix = pos.ix, groups = {}, keys = [], rings = [];
    var square = pos.list.length > LOD_NODES ? SQUARE_RADIUS : 1.5;
    pos.list.forEach(function (i) {
      bucket(groups, keys, ix.color[i]).push(i);
      if (ix.ring[i]) rings.push(i);
    });
    keys.forEach(function (color) {
      var list = groups[color];
      ctx.fillStyle = color;
      chunked(ctx, list.length, function (j) {
        var i = list[j], x = ix.x[i], y = ix.y[i], r = ix.r[i];
        if (r <= square) { ctx.rect(x - r, y - r, 2 * r, 2 * r); return; }
        ctx.moveTo(x + r, y);
        ctx.arc(x, y, r, 0, 2 * Math.PI);
      }, "fill");
    });
    ctx.strokeStyle = "#1b1b1b";
    ctx.lineWidth = 2;
    chunked(ctx, rings.length, function (j) {
      var i = rings[j];
      ctx.moveTo(ix.x[i] + ix.r[i] + 2, ix.y[i]);
      ctx.arc(ix.x[i], ix.y[i], ix.r[i] + 2, 0, 2 * Math.PI);
    }, "stroke");
  };

  // Forced labels (selected node, search matches) always; others from LABEL_MIN_SIZE up, at most
  // one per LABEL_CELL square so that they stay readable.
  // Returns what it drew: [node id, left, right] per label, in CSS pixels.
  CanvasGraph.prototype.drawLabels = function (ctx, pos, s) {
    var ix = pos.ix, taken = {}, cols = Math.ceil(s.w / LABEL_CELL) + 1, list = [], drawn = [];
    var nodes = ix.nodes;
    pos.list.forEach(function (i) { if (ix.label[i] && (ix.force[i] || ix.r[i] >= LABEL_MIN_SIZE)) list.push(i); });
    list.sort(function (a, b) { return ix.force[b] - ix.force[a] || ix.r[b] - ix.r[a]; });
    ctx.font = "12px system-ui, sans-serif";
    ctx.lineWidth = 3;
    ctx.strokeStyle = "rgba(255,255,255,0.85)";
    ctx.fillStyle = "#1b1b1b";
    list.forEach(function (i) {
      var x = ix.x[i], y = ix.y[i], cell = Math.floor(y / LABEL_CELL) * cols + Math.floor(x / LABEL_CELL);
      if (!ix.force[i] && taken[cell]) return;
      taken[cell] = 1;
      var text = String(ix.label[i]), width = ctx.measureText(text).width, lx = x + ix.r[i] + 3;
      // A label that would run past the canvas's right edge (the rightmost nodes' were cut
      // off) goes on the node's left instead.
      if (lx + width > s.w && x - ix.r[i] - 3 - width >= 0) lx = x - ix.r[i] - 3 - width;
      ctx.strokeText(text, lx, y + 4);
      ctx.fillText(text, lx, y + 4);
      drawn.push([nodes[i].id, Math.round(lx), Math.round(lx + width)]);
    });
    return drawn;
  };

  // The node under (x, y) in CSS pixels, else the edge, else null; nodes drawn last win.
  CanvasGraph.prototype.pick = function (x, y) {
    var t = this.transform(this.container.clientWidth, this.container.clientHeight);
    var pos = this.project(t, this.camera.z), ix = pos.ix, best = -1, bestD = Infinity;
    pos.list.forEach(function (i) {
      var d = Math.sqrt((ix.x[i] - x) * (ix.x[i] - x) + (ix.y[i] - y) * (ix.y[i] - y));
      if (d <= ix.r[i] + HIT_SLOP && d <= bestD) { best = i; bestD = d; }
    });
    if (best >= 0) return ix.nodes[best].id;
    var edges = ix.edges, out = this.edgeOut;
    for (var i = edges.length - 1; i >= 0; i--) {
      var a = ix.si[i], b = ix.ti[i];
      if (a < 0 || b < 0 || !ix.shown[a] || !ix.shown[b]) continue;
      if (edges[i].via || edges[i].path) continue;  // opts.pickEdge's
      this.opts.edgeDisplay(edges[i], out);
      if (out.hidden) continue;
      if (segmentDistance(x, y, ix, a, b) <= out.size / 2 + HIT_SLOP) return edges[i].id;
    }
    // Routed edges, and the overlay's (dashed, dotted), are the page's to pick.
    return this.opts.pickEdge ? this.opts.pickEdge(x, y, HIT_SLOP) : null;
  };
  function segmentDistance(x, y, ix, a, b) {
    var ax = ix.x[a], ay = ix.y[a], dx = ix.x[b] - ax, dy = ix.y[b] - ay, l2 = dx * dx + dy * dy;
    var u = l2 ? Math.max(0, Math.min(1, ((x - ax) * dx + (y - ay) * dy) / l2)) : 0;
    var px = ax + u * dx - x, py = ay + u * dy - y;
    return Math.sqrt(px * px + py * py);
  }

  // Wheel zooms about the pointer; a drag pans; a press and release without moving selects.
  CanvasGraph.prototype.wire = function () {
    var self = this, c = this.canvas, down = null;
    c.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var r = c.getBoundingClientRect();
      self.zoomAt(ev.clientX - r.left, ev.clientY - r.top, Math.pow(1.2, -ev.deltaY / 100));
    }, { passive: false });
    c.addEventListener("pointerdown", function (ev) {
      down = { x: ev.clientX, y: ev.clientY, moved: false };
      c.setPointerCapture(ev.pointerId);
    });
    c.addEventListener("pointermove", function (ev) {
      if (!down) return;
      var dx = ev.clientX - down.x, dy = ev.clientY - down.y;
      if (!down.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      down.moved = true;
      self.panBy(dx, dy);
      down.x = ev.clientX; down.y = ev.clientY;
    });
    c.addEventListener("pointerup", function (ev) {
      var was = down;
      down = null;
      if (!was || was.moved) return;
      var r = c.getBoundingClientRect(), id = self.pick(ev.clientX - r.left, ev.clientY - r.top);
      if (id && self.opts.onClick) self.opts.onClick(id);
    });
  };
  CanvasGraph.prototype.panBy = function (dx, dy) {
    var t = this.transform(this.container.clientWidth, this.container.clientHeight);
    this.camera.rx -= dx / t.k / t.bw;
    this.camera.ry += dy / t.k / t.bh;
    this.schedule();
  };
  CanvasGraph.prototype.zoomAt = function (x, y, factor) {
    var t = this.transform(this.container.clientWidth, this.container.clientHeight);
    var z = Math.max(0.2, Math.min(200, this.camera.z * factor));
    // Keep the graph point under the pointer where it is.
    var gx = t.cx + (x - t.w / 2) / t.k, gy = t.cy - (y - t.h / 2) / t.k, k2 = t.k * z / this.camera.z;
    var cx = gx - (x - t.w / 2) / k2, cy = gy + (y - t.h / 2) / k2;
    this.camera = { rx: (cx - t.mx) / t.bw, ry: (cy - t.my) / t.bh, z: z };
    this.schedule();
  };

  window.ObCanvasGraph = CanvasGraph;
})();
