"""A static stand-in for the live endpoint (tests/live/live.sh): serves PAGE at /, STATUS at
/status and LIVE at /live.json on 127.0.0.1 (a port the kernel picks, printed first), the
same bytes at every request, so a page loaded from it shows known figures whatever the run
does meanwhile. It exits by itself after 120 s.

  replay.py PAGE STATUS LIVE
"""
import http.server
import os
import sys
import threading

FILES = {"/": (sys.argv[1], "text/html; charset=utf-8"),
         "/status": (sys.argv[2], "application/json"),
         "/live.json": (sys.argv[3], "application/json")}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path not in FILES:
            self.send_error(404)
            return
        path, ctype = FILES[self.path]
        with open(path, "rb") as f:
            body = f.read()
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Timer(120, lambda: os._exit(0)).start()
print(server.server_address[1], flush=True)
server.serve_forever()
