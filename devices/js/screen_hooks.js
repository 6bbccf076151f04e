// collabui: init script run before any page script. Keeps what a screenshot's concealment
// (conceal.js) cannot find in the DOM: closed shadow roots (element.shadowRoot is null for
// them) and the text each 2D canvas was given to draw. Both live under one symbol on window,
// not enumerable; the page behaves as before (its roots stay closed to element.shadowRoot).
(() => {
  const KEY = Symbol.for('collabui.screen');
  if (window[KEY]) return;
  const closed = new WeakMap();  // host element -> its closed shadow root
  const drawn = new WeakMap();   // canvas -> the text drawn on it (the last 4,096 characters)
  Object.defineProperty(window, KEY, {value: {closed, drawn}, enumerable: false});
  const attach = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) {
    const root = attach.call(this, init);
    if (init && init.mode === 'closed') closed.set(this, root);
    return root;
  };
  const contexts = [window.CanvasRenderingContext2D, window.OffscreenCanvasRenderingContext2D];
  for (const context of contexts.filter(Boolean)) {
    for (const name of ['fillText', 'strokeText']) {
      const original = context.prototype[name];
      context.prototype[name] = function (text, ...rest) {
        const canvas = this.canvas;
        // Joined without a separator: a value drawn a character at a time is still found.
        if (canvas) drawn.set(canvas, ((drawn.get(canvas) || '') + String(text)).slice(-4096));
        return original.call(this, text, ...rest);
      };
    }
  }
})();
