// collabui: one-round-trip DOM walk producing the tree behind AutoWebBench-style simplified HTML.
//
// Called as `page.evaluate(SOURCE, opts)`; SOURCE is this file (an arrow function expression).
// opts = {skip: [css selectors], globals: [window var names], maxText: int, maxOptions: int,
//         shuffle: bool, seed: uint32}
// Returns {tree, count, url, title, scrollY, innerWidth, innerHeight, scrollHeight, globals}.
//
// tree: null (nothing visible) or a node {tag, id, parts}: `tag` is the lower-case tag name
// ('' for an anonymous group), `id` the short upper-case id of an interactive element (else
// null), `parts` its text runs (strings) and child nodes in order; interactive nodes also
// carry `dom` and `box` (see toJson), which no rendering reads. Python renders it
// (collabui.devices.simplify: `<tag[ID]| text children>`, or text-first lines); the ids are
// written to the elements as data-collabui-id so actions find them.
// Non-interactive wrappers without own text collapse into their child (one child) or into an
// anonymous group (several children); invisible elements are dropped.
//
// opts.shuffle: (1) within every node, each maximal run of consecutive interactive child nodes
// is shuffled, except that a label holding only text and a form field right after a text run or
// such a label stay in place (they read as "field labelled X"); (2) ids are drawn at random from
// A, B, ..., Z, AA, ... (a pool of max(26, 2 x count)) instead of being handed out in document
// order. Both use mulberry32(opts.seed), so one seed gives one observation.
(opts) => {
  const SKIP_TAGS = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK',
    'BR', 'HR', 'WBR', 'PARAM', 'SOURCE', 'TRACK', 'OPTION', 'OPTGROUP', 'DATALIST', 'CANVAS']);
  const LEAF_TAGS = new Set(['INPUT', 'TEXTAREA', 'SELECT', 'IMG', 'IFRAME', 'VIDEO',
    'AUDIO', 'OBJECT', 'EMBED']);
  // Inline formatting whose plain text is merged into the parent's text run (compactness).
  const INLINE_TAGS = new Set(['B', 'STRONG', 'EM', 'I', 'U', 'S', 'SMALL', 'BIG', 'MARK', 'SUB',
    'SUP', 'ABBR', 'CODE', 'FONT', 'TT', 'Q', 'CITE', 'TIME', 'DEL', 'INS', 'KBD', 'VAR', 'DFN']);
  const INTERACTIVE_TAGS = new Set(['A', 'BUTTON', 'INPUT', 'SELECT', 'TEXTAREA', 'LABEL',
    'SUMMARY']);
  const ROLES = new Set(['button', 'link', 'checkbox', 'radio', 'tab', 'menuitem', 'option',
    'textbox', 'switch', 'combobox', 'menuitemcheckbox', 'menuitemradio', 'searchbox']);
  const maxText = opts.maxText || 300;
  const maxOptions = opts.maxOptions || 30;

  const skip = new Set();
  for (const sel of opts.skip || []) {
    for (const e of document.querySelectorAll(sel)) skip.add(e);
  }
  for (const e of document.querySelectorAll('[data-collabui-id]')) {
    e.removeAttribute('data-collabui-id');
  }

  const clean = (s) => {
    s = (s || '').replace(/\s+/g, ' ').trim();
    return s.length > maxText ? s.slice(0, maxText - 1) + '\u2026' : s;
  };

  // A <label> acts only through its control (a click focuses or toggles it); one without a
  // control does nothing, so it gets no id and reads as the field's name (agents typed into
  // such labels instead of the input beside them).
  const labelWithoutControl = (el, tag) => tag === 'LABEL' && !el.control &&
    !el.querySelector('input,select,textarea,button');

  const interactive = (el, tag, style, parentPointer) => {
    if (INTERACTIVE_TAGS.has(tag) && !labelWithoutControl(el, tag)) return true;
    if (ROLES.has((el.getAttribute('role') || '').toLowerCase())) return true;
    if (el.hasAttribute('onclick') || el.hasAttribute('onmouseover') ||
        typeof el.onclick === 'function' || el.__collabuiClick) return true;
    const tabindex = el.getAttribute('tabindex');
    if (tabindex !== null && Number(tabindex) >= 0) return true;
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return true;
    // `cursor` is inherited: only the element that introduces the pointer is the target.
    return style.cursor === 'pointer' && !parentPointer;
  };

  const fieldText = (el, tag) => {
    const out = [];
    if (tag === 'SELECT') {
      const chosen = el.selectedOptions && el.selectedOptions[0];
      out.push(chosen ? clean(chosen.textContent) : '');
      const labels = Array.from(el.options).map((o) => clean(o.textContent));
      const shown = labels.slice(0, maxOptions).join(' | ');
      out.push('options: ' + shown + (labels.length > maxOptions ? ' | \u2026' : ''));
    } else {
      const type = tag === 'TEXTAREA' ? 'textarea' : (el.type || 'text').toLowerCase();
      if (type !== 'text' && type !== 'textarea') out.push(type);
      if (type === 'checkbox' || type === 'radio') {
        out.push(String(el.checked));
      } else if (type === 'password') {
        if (el.value) out.push('*'.repeat(Math.min(el.value.length, 20)));
      } else if (el.value) {
        out.push(clean(el.value));
      }
      if (!el.value && el.placeholder) out.push('placeholder: ' + clean(el.placeholder));
      if (el.disabled) out.push('disabled');
    }
    const aria = clean(el.getAttribute('aria-label'));
    if (aria) out.push(aria);
    return out.filter((s) => s !== '').join('; ');
  };

  const leafText = (el, tag) => {
    if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT') return fieldText(el, tag);
    return clean(el.getAttribute('alt') || el.getAttribute('aria-label') ||
      el.getAttribute('title') || '');
  };

  // Accessible name, else `#id` / `.class`: the only textual clue an icon-only control offers.
  const hintOf = (el) => {
    const name = clean(el.getAttribute('aria-label') || el.getAttribute('title') || '');
    if (name) return name;
    if (el.id && !/^[0-9]/.test(el.id)) return '#' + el.id;
    const cls = (typeof el.className === 'string' ? el.className : '').trim().split(/\s+/)[0];
    return cls ? '.' + cls : '';
  };

  const childNodesOf = (el) => {
    const nodes = Array.from(el.childNodes);
    if (el.shadowRoot) nodes.push(...el.shadowRoot.childNodes);
    return nodes;
  };

  // Returns null (dropped), a string (text), or a node {tag, el, inter, parts}.
  const walk = (el, parentPointer) => {
    if (skip.has(el)) return null;
    const tag = el.tagName.toUpperCase();
    if (SKIP_TAGS.has(tag)) return null;
    const style = getComputedStyle(el);
    if (style.display === 'none' || style.visibility === 'hidden' ||
        style.visibility === 'collapse' || style.opacity === '0') return null;
    if (tag === 'INPUT' && el.type === 'hidden') return null;
    const inter = interactive(el, tag, style, parentPointer);
    const pointer = style.cursor === 'pointer';
    const parts = [];
    if (LEAF_TAGS.has(tag)) {
      const t = leafText(el, tag);
      if (t) parts.push(t);
    } else {
      let text = '';
      for (const child of childNodesOf(el)) {
        if (child.nodeType === Node.TEXT_NODE) {
          text += ' ' + child.data;
        } else if (child.nodeType === Node.ELEMENT_NODE) {
          const sub = walk(child, pointer);
          if (sub === null) continue;
          if (!sub.inter && INLINE_TAGS.has(sub.tag) &&
              sub.parts.every((p) => typeof p === 'string')) {
            text += ' ' + sub.parts.join(' ') + ' ';
            continue;
          }
          if (clean(text)) parts.push(clean(text));
          text = '';
          parts.push(sub);
        }
      }
      if (clean(text)) parts.push(clean(text));
    }
    const rect = el.getBoundingClientRect();
    const sized = rect.width > 0 && rect.height > 0;
    const hasNode = parts.some((p) => typeof p !== 'string');
    if (!sized && !hasNode) return null;
    if (inter) {
      if (parts.length === 0 && !LEAF_TAGS.has(tag)) {
        const hint = hintOf(el);
        if (hint) parts.push(hint);
      }
      return {tag, el, inter: true, parts, rect};
    }
    if (parts.length === 0) return LEAF_TAGS.has(tag) && tag !== 'IMG' ? {tag, parts} : null;
    if (!parts.some((p) => typeof p === 'string')) {
      return parts.length === 1 ? parts[0] : {tag: '', parts};
    }
    return {tag, parts};
  };

  const idOf = (i) => {
    let s = '';
    do {
      s = String.fromCharCode(65 + (i % 26)) + s;
      i = Math.floor(i / 26) - 1;
    } while (i >= 0);
    return s;
  };

  // mulberry32: a tiny seeded PRNG, so a seed fixes the shuffle in any browser.
  let state = (opts.seed || 0) >>> 0;
  const random = () => {
    state = (state + 0x6D2B79F5) >>> 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const shuffleRange = (arr, lo, hi) => {  // Fisher-Yates on arr[lo:hi]
    for (let i = hi - 1; i > lo; i--) {
      const j = lo + Math.floor(random() * (i - lo + 1));
      [arr[i], arr[j]] = [arr[j], arr[i]];
    }
  };

  const isNode = (p) => typeof p !== 'string';
  const hasInteractive = (node) => node.parts.some((p) => isNode(p) && (p.inter ||
    hasInteractive(p)));
  // A label without a control inside names the field next to it: it reads like text.
  const textLabel = (p) => isNode(p) && p.tag === 'LABEL' && !hasInteractive(p);
  const readsAsText = (p) => !isNode(p) || !p.inter || textLabel(p);
  const FIELD_TAGS = new Set(['INPUT', 'SELECT', 'TEXTAREA']);
  const movable = (parts, i) => {
    const p = parts[i];
    if (!isNode(p) || !p.inter || textLabel(p)) return false;
    return !(FIELD_TAGS.has(p.tag) && i > 0 && readsAsText(parts[i - 1]));
  };

  const shuffleSiblings = (node) => {
    if (!isNode(node)) return;
    const parts = node.parts;
    let start = 0;
    for (let i = 0; i <= parts.length; i++) {
      if (i < parts.length && movable(parts, i)) continue;
      if (i - start > 1) shuffleRange(parts, start, i);
      start = i + 1;
    }
    parts.forEach(shuffleSiblings);
  };

  // Interactive nodes in document (pre-)order: the order ids were always handed out in.
  const interactiveNodes = (node, out) => {
    if (!isNode(node)) return out;
    if (node.inter) out.push(node);
    for (const p of node.parts) interactiveNodes(p, out);
    return out;
  };

  const assignIds = (nodes) => {
    let ids = nodes.map((_, i) => i);
    if (opts.shuffle) {
      // A pool twice as large as needed: neither the ids nor their order follow the layout.
      const pool = Array.from({length: Math.max(26, 2 * nodes.length)}, (_, i) => i);
      shuffleRange(pool, 0, pool.length);
      ids = pool.slice(0, nodes.length);
    }
    nodes.forEach((node, k) => {
      node.id = idOf(ids[k]);
      node.el.setAttribute('data-collabui-id', node.id);
    });
  };

  // `dom`: the element's rank among interactive elements in document order, taken before any
  // shuffle. Never rendered; it lets two renderings of one page name the same element.
  // `box`: [x, y, width, height] of its border box in CSS pixels relative to the viewport (as
  // a screenshot sees it), rounded. Never rendered; the trace viewer outlines the executed
  // element with it.
  const boxOf = (r) => [Math.round(r.x), Math.round(r.y), Math.round(r.width), Math.round(r.height)];
  const toJson = (node) => isNode(node)
    ? Object.assign({tag: node.tag.toLowerCase(), id: node.id || null, parts: node.parts.map(toJson)},
      node.inter ? {dom: node.dom, box: boxOf(node.rect)} : {})
    : node;

  const root = walk(document.body || document.documentElement, false);
  if (root !== null) interactiveNodes(root, []).forEach((node, k) => { node.dom = k; });
  if (root !== null && opts.shuffle) shuffleSiblings(root);
  const listed = root === null ? [] : interactiveNodes(root, []);
  assignIds(listed);
  const globals = {};
  for (const g of opts.globals || []) {
    try { globals[g] = window[g] === undefined ? null : window[g]; } catch (e) { globals[g] = null; }
  }
  return {
    tree: root === null ? null : toJson(root),
    count: listed.length,
    url: location.href,
    title: document.title,
    scrollY: window.scrollY,
    innerWidth: window.innerWidth,
    innerHeight: window.innerHeight,
    scrollHeight: Math.max(document.documentElement.scrollHeight,
      document.body ? document.body.scrollHeight : 0),
    globals,
  };
}
