// Hides values in what a page draws while a screenshot is taken, then puts the page back.
// page.evaluate(source, {values, words, mask}) replaces, in every text node (shadow roots
// included) and in every input's and textarea's value and placeholder, each of `values`
// wherever it occurs and each of `words` where it stands as a whole word (not inside a longer
// one, like collabui.redaction's password masking), by `mask`; it returns how many strings it
// changed. page.evaluate(source, null) restores them (a string the page changed meanwhile is
// left as the page set it) and returns how many it restored.
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
  const escape = (v) => v.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const byLength = (a, b) => b.length - a.length;
  const alternatives = [
    ...arg.values.filter(Boolean).sort(byLength).map(escape),
    ...arg.words.filter(Boolean).sort(byLength).map((w) => `(?<![A-Za-z0-9])${escape(w)}(?![A-Za-z0-9])`),
  ];
  if (!alternatives.length) return 0;
  const pattern = new RegExp(alternatives.join('|'), 'g');
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
