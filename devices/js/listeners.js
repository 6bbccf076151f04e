// collabui: init script run before any page script. Marks elements that get a click or hover
// listener (d3 `.on('click')`, jQuery, addEventListener) so the DOM walk can list them as
// interactive: MiniWoB++ makes plain <div>/<span> clickable this way.
(() => {
  const CLICKY = new Set(['click', 'dblclick', 'mousedown', 'mouseup', 'pointerdown',
    'pointerup', 'touchstart', 'mouseover', 'mouseenter']);
  const original = EventTarget.prototype.addEventListener;
  EventTarget.prototype.addEventListener = function (type, listener, options) {
    if (CLICKY.has(type) && this instanceof Element && this !== document.body &&
        this !== document.documentElement) {
      try { this.__collabuiClick = true; } catch (e) { /* frozen element: ignore */ }
    }
    return original.call(this, type, listener, options);
  };
})();
