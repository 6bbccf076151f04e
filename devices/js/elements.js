// collabui: one-round-trip DOM walk producing a phone-style UI element list (mobile MiniWoB++).
//
// Called as `page.evaluate(SOURCE, opts)`; SOURCE is this file (an arrow function expression).
// opts = {skip: [css selectors], globals: [window var names], maxText: int}
// Returns {elements, count, url, title, scrollY, innerHeight, scrollHeight, globals}.
//
// Listed, in document order, like an Android hierarchy: interactive elements (with the text of
// their non-interactive descendants as label) and non-interactive elements that carry text.
// Only what intersects the viewport is listed; bounds are clipped to it (CSS pixels). Listed
// elements get data-collabui-idx = their index so actions can find them. A <label> that wraps
// or points at a checkbox/radio/field lends its text to that control instead of being listed.
(opts) => {
  const SKIP_TAGS = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK',
    'BR', 'HR', 'WBR', 'OPTION', 'OPTGROUP', 'DATALIST', 'CANVAS']);
  const INLINE_TAGS = new Set(['B', 'STRONG', 'EM', 'I', 'U', 'S', 'SMALL', 'BIG', 'MARK', 'SUB',
    'SUP', 'ABBR', 'CODE', 'FONT', 'TT', 'Q', 'CITE', 'TIME', 'DEL', 'INS', 'KBD', 'VAR', 'DFN',
    'SPAN']);
  const INTERACTIVE_TAGS = new Set(['A', 'BUTTON', 'INPUT', 'SELECT', 'TEXTAREA', 'LABEL',
    'SUMMARY']);
  const ROLE_TYPES = {button: 'Button', link: 'Link', checkbox: 'CheckBox', radio: 'RadioButton',
    tab: 'Tab', menuitem: 'MenuItem', option: 'Option', textbox: 'EditText', switch: 'Switch',
    combobox: 'Spinner', searchbox: 'EditText', menuitemcheckbox: 'CheckBox',
    menuitemradio: 'RadioButton', slider: 'SeekBar'};
  const maxText = opts.maxText || 300;
  const vw = window.innerWidth;
  const vh = window.innerHeight;

  const skip = new Set();
  for (const sel of opts.skip || []) {
    for (const e of document.querySelectorAll(sel)) skip.add(e);
  }
  for (const e of document.querySelectorAll('[data-collabui-idx]')) {
    e.removeAttribute('data-collabui-idx');
  }
  const clean = (s) => {
    s = (s || '').replace(/\s+/g, ' ').trim();
    return s.length > maxText ? s.slice(0, maxText - 1) + '\u2026' : s;
  };

  const isField = (el) => el.tagName === 'TEXTAREA' || el.tagName === 'SELECT' ||
    (el.tagName === 'INPUT' && el.type !== 'hidden');
  const labelled = (label) => label.control || label.querySelector('input,select,textarea');

  const interactive = (el, tag, style, parentPointer) => {
    if (tag === 'LABEL' && labelled(el)) return false; // its control is listed instead
    if (INTERACTIVE_TAGS.has(tag)) return true;
    if (ROLE_TYPES[(el.getAttribute('role') || '').toLowerCase()]) return true;
    if (el.hasAttribute('onclick') || typeof el.onclick === 'function' ||
        el.__collabuiClick) return true;
    const tabindex = el.getAttribute('tabindex');
    if (tabindex !== null && Number(tabindex) >= 0) return true;
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return true;
    return style.cursor === 'pointer' && !parentPointer;
  };

  const typeOf = (el, tag) => {
    const role = ROLE_TYPES[(el.getAttribute('role') || '').toLowerCase()];
    if (role) return role;
    if (tag === 'A') return 'Link';
    if (tag === 'BUTTON' || tag === 'SUMMARY') return 'Button';
    if (tag === 'SELECT') return 'Spinner';
    if (tag === 'TEXTAREA' || el.isContentEditable) return 'EditText';
    if (tag === 'IMG') return 'ImageView';
    if (tag === 'INPUT') {
      const t = (el.type || 'text').toLowerCase();
      if (t === 'checkbox') return 'CheckBox';
      if (t === 'radio') return 'RadioButton';
      if (t === 'range') return 'SeekBar';
      if (['button', 'submit', 'reset', 'image'].includes(t)) return 'Button';
      return 'EditText';
    }
    return 'View';
  };

  const labelFor = (el) => {
    let text = '';
    if (el.labels && el.labels.length) text = Array.from(el.labels).map((l) => l.innerText).join(' ');
    return clean(text);
  };

  const fieldInfo = (el, tag, item) => {
    const t = (el.type || '').toLowerCase();
    if (tag === 'SELECT') {
      const chosen = el.selectedOptions && el.selectedOptions[0];
      item.text = chosen ? clean(chosen.textContent) : '';
      item.desc = labelFor(el);
      item.clickable = true;
    } else if (t === 'checkbox' || t === 'radio') {
      item.checkable = true;
      item.checked = el.checked;
      item.clickable = true;
      item.text = labelFor(el);
    } else if (['button', 'submit', 'reset'].includes(t)) {
      item.text = clean(el.value);
      item.clickable = true;
    } else {
      item.editable = !el.readOnly;
      item.clickable = true;
      item.password = t === 'password';
      item.text = item.password ? (el.value ? '***' : '') : clean(el.value);
      item.hint = clean(el.placeholder || '');
      item.desc = labelFor(el);
    }
    item.enabled = !el.disabled;
  };

  const clip = (r) => {
    const l = Math.max(0, r.left), t = Math.max(0, r.top);
    const ri = Math.min(vw, r.right), b = Math.min(vh, r.bottom);
    return ri > l && b > t ? [Math.round(l), Math.round(t), Math.round(ri), Math.round(b)] : null;
  };

  const out = [];
  const hidden = (el, style) => style.display === 'none' || style.visibility === 'hidden' ||
    style.visibility === 'collapse' || style.opacity === '0';

  // sink: labels collected for an interactive ancestor without text of its own (or null).
  const walk = (el, sink, parentPointer) => {
    if (skip.has(el)) return;
    const tag = el.tagName.toUpperCase();
    if (SKIP_TAGS.has(tag)) return;
    const style = getComputedStyle(el);
    if (hidden(el, style) || (tag === 'INPUT' && el.type === 'hidden')) return;
    const pointer = style.cursor === 'pointer';
    const kids = Array.from(el.children);
    if (interactive(el, tag, style, parentPointer)) {
      const bounds = clip(el.getBoundingClientRect());
      const item = {el, type: typeOf(el, tag), text: '', desc: '', hint: '', id: el.id || '',
        bounds, clickable: true, editable: false, checkable: false, checked: false,
        enabled: !el.disabled, focused: document.activeElement === el, password: false,
        scrollable: false, selected: false};
      if (isField(el)) fieldInfo(el, tag, item);
      else if (el.isContentEditable) { item.editable = true; item.text = clean(el.innerText); }
      if (tag === 'IMG') item.text = clean(el.alt || el.title || '');
      item.desc = item.desc || clean(el.getAttribute('aria-label') || el.title || '');
      if (bounds) out.push(item);
      const own = [];
      if (!isField(el) && !el.isContentEditable) {
        for (const child of el.childNodes) {
          if (child.nodeType === Node.TEXT_NODE && clean(child.data)) own.push(clean(child.data));
          else if (child.nodeType === Node.ELEMENT_NODE) walk(child, own, pointer);
        }
        if (!item.text) item.text = clean(own.join(' '));
      }
      if (!bounds && sink) sink.push(item.text);
      return;
    }
    const inlineOnly = kids.every((k) => INLINE_TAGS.has(k.tagName) &&
      !interactive(k, k.tagName, getComputedStyle(k), pointer) && k.children.length === 0);
    // A label that names a control lends it its text (the control's line shows it).
    const lends = tag === 'LABEL' && labelled(el);
    const direct = lends ? '' : clean(Array.from(el.childNodes)
      .filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.data).join(' '));
    if ((direct || tag === 'IMG') && inlineOnly) {
      const text = tag === 'IMG' ? clean(el.alt || el.title || '') : clean(el.innerText);
      if (!text) return;
      if (sink) { sink.push(text); return; }
      const bounds = clip(el.getBoundingClientRect());
      if (bounds) {
        out.push({el, type: tag === 'IMG' ? 'ImageView' : 'TextView', text, desc: '', hint: '',
          id: el.id || '', bounds, clickable: false, editable: false, checkable: false,
          checked: false, enabled: true, focused: false, password: false, scrollable: false,
          selected: false});
      }
      return;
    }
    if (direct) {
      if (sink) sink.push(direct);
      else {
        const bounds = clip(el.getBoundingClientRect());
        if (bounds) out.push({el, type: 'TextView', text: direct, desc: '', hint: '', id: el.id || '',
          bounds, clickable: false, editable: false, checkable: false, checked: false,
          enabled: true, focused: false, password: false, scrollable: false, selected: false});
      }
    }
    for (const child of kids) walk(child, sink, pointer);
    if (el.shadowRoot) for (const child of el.shadowRoot.children) walk(child, sink, pointer);
  };

  walk(document.body || document.documentElement, null, false);
  const elements = out.map((item, i) => {
    item.el.setAttribute('data-collabui-idx', String(i));
    const {el, ...rest} = item;
    return rest;
  });
  const globals = {};
  for (const g of opts.globals || []) {
    try { globals[g] = window[g] === undefined ? null : window[g]; } catch (e) { globals[g] = null; }
  }
  return {
    elements,
    count: elements.length,
    url: location.href,
    title: document.title,
    scrollY: window.scrollY,
    innerHeight: window.innerHeight,
    scrollHeight: Math.max(document.documentElement.scrollHeight,
      document.body ? document.body.scrollHeight : 0),
    globals,
  };
}
