// The page's one WebSocket: JSON frames out (queued until it is open), JSON frames in.
// When it drops it comes back (after 0.5 s, then longer) and says so, so the page can
// open its panes' sessions again. The subprotocols carry the token in the handshake.

export class Connection {
  constructor(url, protocols, { onFrame, onOpen, onDown }) {
    this.url = url;
    this.protocols = protocols;
    this.handlers = { onFrame, onOpen, onDown };
    this.queue = [];
    this.delay = 500;
    this.socket = null;
    this.connect();
  }

  connect() {
    const socket = new WebSocket(this.url, this.protocols);
    this.socket = socket;
    socket.addEventListener("open", () => {
      this.delay = 500;
      this.handlers.onOpen();
      for (const frame of this.queue.splice(0)) socket.send(frame);
    });
    socket.addEventListener("message", (message) => {
      let frame;
      try {
        frame = JSON.parse(message.data);
      } catch {
        return;
      }
      this.handlers.onFrame(frame);
    });
    socket.addEventListener("close", () => {
      this.handlers.onDown();
      setTimeout(() => this.connect(), this.delay);
      this.delay = Math.min(this.delay * 2, 10_000);
    });
  }

  get ready() {
    return this.socket.readyState === WebSocket.OPEN;
  }

  send(frame) {
    const text = JSON.stringify(frame);
    if (this.ready) this.socket.send(text);
    else this.queue.push(text);
  }
}
