// collabui: one-round-trip DOM walk producing AutoWebBench-style simplified HTML.
//
// Called as `page.evaluate(SOURCE, opts)`; SOURCE is this file (an arrow function expression).
// opts = {skip: [css selectors], globals: [window var names], maxText: int, maxOptions: int}
// Returns {text, count, url, title, scrollY, innerHeight, scrollHeight, globals}.
//
// Format: `<tag| text children>`; interactive elements get a short upper-case id
// (`<button[B]| Submit>`), written to the element as data-collabui-id so actions find it.
// Non-interactive wrappers without own text collapse into their child (one child) or into an
// anonymous group `< a b >` (several children); invisible elements are dropped.
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

  const interactive = (el, tag, style, parentPointer) => {
    if (INTERACTIVE_TAGS.has(tag)) return true;
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
      return {tag, el, inter: true, parts};
    }
    if (parts.length === 0) return LEAF_TAGS.has(tag) && tag !== 'IMG' ? {tag, parts} : null;
    if (!parts.some((p) => typeof p === 'string')) {
      return parts.length === 1 ? parts[0] : {tag: '', parts};
    }
    return {tag, parts};
  };

  let n = 0;
  const nextId = () => {
    let i = n++;
    let s = '';
    do {
      s = String.fromCharCode(65 + (i % 26)) + s;
      i = Math.floor(i / 26) - 1;
    } while (i >= 0);
    return s;
  };

  const render = (node) => {
    if (typeof node === 'string') return node;
    let head = '<' + node.tag.toLowerCase();
    if (node.inter) {
      const id = nextId();
      node.el.setAttribute('data-collabui-id', id);
      head += '[' + id + ']';
    }
    const body = node.parts.map(render).join(' ');
    const last = node.parts[node.parts.length - 1];
    const tail = last !== undefined && typeof last !== 'string' ? ' >' : '>';
    if (node.tag === '') return '< ' + body + ' >';
    return head + '| ' + body + tail;
  };

  const root = walk(document.body || document.documentElement, false);
  const text = root === null ? '' : render(root);
  const globals = {};
  for (const g of opts.globals || []) {
    try { globals[g] = window[g] === undefined ? null : window[g]; } catch (e) { globals[g] = null; }
  }
  return {
    text,
    count: n,
    url: location.href,
    title: document.title,
    scrollY: window.scrollY,
    innerHeight: window.innerHeight,
    scrollHeight: Math.max(document.documentElement.scrollHeight,
      document.body ? document.body.scrollHeight : 0),
    globals,
  };
}
