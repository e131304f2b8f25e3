// A virtualized list: only the rows near the viewport are in the DOM. Every row has a
// height — measured once rendered, else estimated (the mean of those measured) — and a
// spacer as tall as all of them keeps the scrollbar true. While the view is at the
// bottom it stays there as rows arrive or grow; otherwise the first visible row stays
// put however the rows above it change — rows grown, rows prepended (an earlier page
// of the history), or an element before the list (its "earlier messages" line) shown
// or hidden.

const OVERSCAN_PX = 800;
const DEFAULT_ROW_PX = 48;
const PINNED_PX = 24;

export class VirtualList {
  // `scroller` scrolls; `rows()` returns the current array of rows ({key, version});
  // `render(row)` makes a row's element; `laidOut()`, if given, is called after every
  // layout (the view may have moved).
  constructor(scroller, { rows, render, laidOut = () => {} }) {
    this.scroller = scroller;
    this.rowsOf = rows;
    this.render = render;
    this.laidOut = laidOut;
    this.spacer = document.createElement("div");
    this.spacer.className = "spacer";
    scroller.prepend(this.spacer);
    this.heights = new Map(); // key -> measured px
    this.measured = { sum: 0, count: 0 };
    this.offsets = new Float64Array(1);
    this.indexOf = new Map();
    this.keys = []; // the rows' keys when the offsets were computed
    this.dirty = true;
    this.mounted = new Map(); // key -> element
    this.pinned = true;
    this.frame = 0;
    this.width = 0;
    // Where the spacer was when the rows were last placed: what the user last saw.
    this.placedTop = this.spacer.offsetTop;
    scroller.addEventListener("scroll", () => {
      const { scrollTop, scrollHeight, clientHeight } = scroller;
      this.pinned = scrollHeight - scrollTop - clientHeight <= PINNED_PX;
      this.schedule();
    });
    // A row whose <details> opens or closes changes height: measure again.
    this.spacer.addEventListener("toggle", () => this.schedule(), true);
    new ResizeObserver(() => {
      if (scroller.clientWidth !== this.width) {
        this.width = scroller.clientWidth;
        this.forget(); // rows wrap differently at another width
      }
      this.schedule();
    }).observe(scroller);
  }

  // The rows changed (added, removed, or one of them): lay out on the next frame.
  changed() {
    this.dirty = true;
    this.schedule();
  }

  // A new history: drop every element and height, and show its end.
  reset() {
    for (const element of this.mounted.values()) element.remove();
    this.mounted.clear();
    this.forget();
    this.pinned = true;
    this.schedule();
  }

  scrollToEnd() {
    this.pinned = true;
    this.schedule();
  }

  forget() {
    this.heights.clear();
    this.measured = { sum: 0, count: 0 };
    this.dirty = true;
  }

  schedule() {
    if (this.frame === 0) {
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        this.layout();
      });
    }
  }

  estimate() {
    const { sum, count } = this.measured;
    return count ? sum / count : DEFAULT_ROW_PX;
  }

  recompute() {
    const rows = this.rowsOf();
    const offsets = new Float64Array(rows.length + 1);
    const estimate = this.estimate();
    this.indexOf.clear();
    for (let i = 0; i < rows.length; i++) {
      this.indexOf.set(rows[i].key, i);
      offsets[i + 1] = offsets[i] + (this.heights.get(rows[i].key) ?? estimate);
    }
    this.offsets = offsets;
    this.keys = rows.map((row) => row.key);
    this.dirty = false;
  }

  // The first row whose bottom is below `y` (binary search over the offsets).
  indexAt(y) {
    const offsets = this.offsets;
    let low = 0;
    let high = offsets.length - 2;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (offsets[mid + 1] > y) high = mid;
      else low = mid + 1;
    }
    return Math.max(0, low);
  }

  viewTop() {
    return this.scroller.scrollTop - this.spacer.offsetTop;
  }

  layout() {
    const rows = this.rowsOf();
    // Where the first visible row is now (the offsets and the spacer position it was
    // placed by, as the user saw it), to keep it there however the rows above it, or
    // what comes before the spacer, changed since — unless the view follows the end.
    let anchor = null;
    if (!this.pinned && this.keys.length) {
      const top = this.scroller.scrollTop - this.placedTop;
      const index = this.indexAt(top);
      anchor = { key: this.keys[index], delta: top - this.offsets[index] };
    }
    for (let pass = 0; pass < 4; pass++) {
      if (this.dirty) this.recompute();
      this.spacer.style.height = `${this.offsets[rows.length]}px`;
      this.spacer.dataset.rows = String(rows.length);
      if (this.pinned) {
        this.scroller.scrollTop = this.scroller.scrollHeight;
      } else if (anchor !== null && this.indexOf.has(anchor.key)) {
        const y = this.offsets[this.indexOf.get(anchor.key)] + anchor.delta;
        this.scroller.scrollTop = y + this.spacer.offsetTop;
      }
      if (!this.mount(rows)) break;
    }
    this.placedTop = this.spacer.offsetTop;
    this.laidOut();
  }

  // Render the rows near the viewport, drop the others, measure; whether a height changed.
  mount(rows) {
    const top = this.viewTop();
    const start = top - OVERSCAN_PX;
    const end = top + this.scroller.clientHeight + OVERSCAN_PX;
    const keep = new Set();
    const placed = [];
    for (let i = rows.length ? this.indexAt(start) : 0; i < rows.length; i++) {
      if (this.offsets[i] > end) break;
      const row = rows[i];
      let element = this.mounted.get(row.key);
      if (element === undefined || element.version !== row.version) {
        const fresh = this.render(row);
        fresh.version = row.version;
        fresh.dataset.key = row.key;
        if (element === undefined) this.spacer.append(fresh);
        else element.replaceWith(fresh);
        element = fresh;
        this.mounted.set(row.key, element);
      }
      element.dataset.index = String(i);
      element.style.transform = `translateY(${this.offsets[i]}px)`;
      keep.add(row.key);
      placed.push([row.key, element]);
    }
    for (const [key, element] of this.mounted) {
      if (!keep.has(key)) {
        element.remove();
        this.mounted.delete(key);
      }
    }
    let changed = false;
    for (const [key, element] of placed) {
      const height = element.offsetHeight;
      const before = this.heights.get(key);
      if (before === height) continue;
      if (before === undefined) this.measured.count += 1;
      this.measured.sum += height - (before ?? 0);
      this.heights.set(key, height);
      changed = true;
    }
    if (changed) this.dirty = true;
    return changed;
  }
}
