// Hides values in what a page draws while a screenshot is taken, then puts the page back.
// page.evaluate(source, {pattern, mask}) replaces, in every text node (shadow roots included)
// and in every input's and textarea's value and placeholder, what `pattern` matches by `mask`;
// it returns how many strings it changed. `pattern` is collabui.devices._screen.ScreenMask's
// (values anywhere, words where they stand whole): the rule has one owner, in Python, which the
// Android device also uses to find the elements it paints over. page.evaluate(source, null)
// restores them (a string the page changed meanwhile is left as the page set it) and returns
// how many it restored.
// Not covered: text drawn in canvas or images, CSS generated content, closed shadow roots.
(arg) => {
  const KEY = '__collabuiConcealed';
  if (arg === null) {
    const saved = window[KEY] || [];
    delete window[KEY];
    let restored = 0;
    for (const [node, prop, original, masked] of saved.reverse()) {
      if (node[prop] === masked) { node[prop] = original; restored += 1; }
    }
    return restored;
  }
  if (!arg.pattern) return 0;
  const pattern = new RegExp(arg.pattern, 'g');
  const changed = [];
  const hide = (node, prop) => {
    const value = node[prop];
    if (typeof value !== 'string' || !value) return;
    const masked = value.replace(pattern, arg.mask);
    if (masked !== value) { changed.push([node, prop, value, masked]); node[prop] = masked; }
  };
  const visit = (root) => {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
    for (let node = walker.currentNode; node; node = walker.nextNode()) {
      if (node.nodeType === Node.TEXT_NODE) { hide(node, 'nodeValue'); continue; }
      if (node.tagName === 'INPUT' || node.tagName === 'TEXTAREA') {
        hide(node, 'value');
        hide(node, 'placeholder');
      }
      if (node.shadowRoot) visit(node.shadowRoot);
    }
  };
  visit(document.documentElement || document);
  Object.defineProperty(window, KEY, {value: changed, configurable: true, enumerable: false});
  return changed.length;
}
