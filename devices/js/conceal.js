// Hides values in what a page draws while a screenshot is taken, then puts the page back.
// page.evaluate(source, {pattern, mask}) replaces, in every text node (open and closed shadow
// roots included) and in every input's and textarea's value and placeholder, what `pattern`
// matches by `mask`, and covers with an opaque box every canvas that was given matching text to
// draw (screen_hooks.js keeps the closed roots and the drawn text); it returns how many strings
// it changed plus how many canvases it covered. `pattern` is collabui.devices._screen.ScreenMask's
// (values anywhere, words where they stand whole): the rule has one owner, in Python, which the
// Android device also uses to find the elements it paints over. page.evaluate(source, null)
// restores them (a string the page changed meanwhile is left as the page set it; the boxes are
// removed) and returns how many it restored.
// Not covered: text in images or drawn as paths (WebGL, SVG paths), CSS generated content.
(arg) => {
  const KEY = '__collabuiConcealed';
  if (arg === null) {
    const saved = window[KEY] || {changed: [], covers: []};
    delete window[KEY];
    let restored = 0;
    for (const [node, prop, original, masked] of saved.changed.reverse()) {
      if (node[prop] === masked) { node[prop] = original; restored += 1; }
    }
    for (const box of saved.covers) { box.remove(); restored += 1; }
    return restored;
  }
  if (!arg.pattern) return 0;
  const pattern = new RegExp(arg.pattern, 'g');
  const finds = new RegExp(arg.pattern);  // no 'g': test() keeps no state between calls
  const hooks = window[Symbol.for('collabui.screen')];
  const changed = [];
  const covers = [];
  const hide = (node, prop) => {
    const value = node[prop];
    if (typeof value !== 'string' || !value) return;
    const masked = value.replace(pattern, arg.mask);
    if (masked !== value) { changed.push([node, prop, value, masked]); node[prop] = masked; }
  };
  const cover = (canvas) => {
    const r = canvas.getBoundingClientRect();
    if (!(r.width > 0 && r.height > 0)) return;
    const box = document.createElement('div');
    box.style.cssText = `all: initial; position: fixed; left: ${r.left}px; top: ${r.top}px; ` +
      `width: ${r.width}px; height: ${r.height}px; background: #808080; ` +
      'z-index: 2147483647; pointer-events: none;';
    document.documentElement.appendChild(box);
    covers.push(box);
  };
  const visit = (root) => {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
    for (let node = walker.currentNode; node; node = walker.nextNode()) {
      if (node.nodeType === Node.TEXT_NODE) { hide(node, 'nodeValue'); continue; }
      if (node.tagName === 'INPUT' || node.tagName === 'TEXTAREA') {
        hide(node, 'value');
        hide(node, 'placeholder');
      }
      if (node.tagName === 'CANVAS' && hooks && finds.test(hooks.drawn.get(node) || '')) cover(node);
      const shadow = node.shadowRoot || (hooks && hooks.closed.get(node));
      if (shadow) visit(shadow);
    }
  };
  visit(document.documentElement || document);
  Object.defineProperty(window, KEY, {value: {changed, covers}, configurable: true, enumerable: false});
  return changed.length + covers.length;
}
