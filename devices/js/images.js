// collabui: wait (bounded) for the images that give elements their size.
//
// Called as `page.evaluate(SOURCE, ms)` before the walk (simplify.js). An element whose size is
// an image (CSS `content: url(...)`, as MiniWoB's email icons; an <img> without a size of its own)
// has no width until the image arrives, and the walk drops it as invisible: a page read while
// its icons load lists fewer elements, under other ids. Resolves when every such image has
// loaded or failed, or after `ms`; returns how many were awaited. Lazy images are not awaited
// (they load when scrolled to).
async (ms) => {
  const pending = new Set();
  const urlIn = /url\(\s*["']?([^"')]+)["']?\s*\)/g;
  for (const el of document.querySelectorAll('body *')) {
    if (el.tagName === 'IMG') {
      if (!el.complete && el.loading !== 'lazy' && (el.currentSrc || el.src)) pending.add(el.currentSrc || el.src);
      continue;
    }
    const content = getComputedStyle(el).content;
    if (content && content.includes('url(')) {
      for (const m of content.matchAll(urlIn)) pending.add(m[1]);
    }
  }
  if (pending.size === 0) return 0;
  // Loading the same address again shares the page's request (or its cache): when it settles,
  // so has the element's own image.
  const settle = (src) => new Promise((done) => {
    const img = new Image();
    img.onload = img.onerror = () => done();
    img.src = src;
  });
  const late = new Promise((done) => setTimeout(done, ms));
  await Promise.race([Promise.all([...pending].map(settle)), late]);
  // One frame, so the layout the walk reads has the images' sizes (bounded: a hidden page
  // gets no frames).
  await Promise.race([new Promise((done) => requestAnimationFrame(() => done())), new Promise((d) => setTimeout(d, 50))]);
  return pending.size;
}
