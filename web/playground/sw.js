// Keeps the playground working offline once it has been loaded: every file it fetched is kept,
// the network is asked first (so a rebuilt page shows at once) and the kept copy answers when
// the network does not.
const CACHE = 'jumppod-playground';
const FILES = ['./', 'index.html', 'playground.js', 'playground.css', 'examples.js', 'build.json', 'pkg/jumppod_web.js', 'pkg/jumppod_web_bg.wasm'];

self.addEventListener('install', (event) => {
  // The page was fetched before this worker existed: keep its files now.
  event.waitUntil(
    caches
      .open(CACHE)
      .then((cache) => cache.addAll(FILES))
      .then(() => self.skipWaiting()),
  );
});
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('fetch', (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== 'GET' || url.origin !== self.location.origin) return;
  event.respondWith(
    (async () => {
      const cache = await caches.open(CACHE);
      try {
        const response = await fetch(event.request);
        if (response.ok) await cache.put(event.request, response.clone());
        return response;
      } catch (error) {
        const kept = await cache.match(event.request, { ignoreSearch: true });
        if (kept) return kept;
        throw error;
      }
    })(),
  );
});
