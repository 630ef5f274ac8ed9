;;; probe.el --- Emacs (batch) with the README's eglot configuration: open a mapping file, wait for rca-lsp's
;;; diagnostics (Flymake), hover the first one with the wanted code, write what it saw as JSON.  -*- lexical-binding: t -*-
(require 'json)
(let* ((file (getenv "RCA_FILE"))
       (wanted (getenv "RCA_WANTED_CODE"))
       (code-of (lambda (d) (let ((text (flymake-diagnostic-text d)))
                              (when (string-match "\\[\\([a-z-]+\\)\\]" text) (match-string 1 text)))))
       (deadline (+ (float-time) 30)))
  (find-file file)
  (run-hooks 'post-command-hook) ; what the command loop does after `find-file': eglot-ensure connects here
  (while (and (< (float-time) deadline)
              (not (seq-some (lambda (d) (equal (funcall code-of d) wanted)) (flymake-diagnostics))))
    (accept-process-output nil 0.05))
  (let* ((server (eglot-current-server))
         (diagnostics (sort (flymake-diagnostics) (lambda (a b) (< (flymake-diagnostic-beg a) (flymake-diagnostic-beg b)))))
         (target (seq-find (lambda (d) (equal (funcall code-of d) wanted)) diagnostics))
         (hover (when target
                  (goto-char (+ 3 (flymake-diagnostic-beg target)))
                  (plist-get (plist-get (jsonrpc-request server :textDocument/hover
                                                         (list :textDocument (list :uri (concat "file://" file))
                                                               :position (list :line (1- (line-number-at-pos))
                                                                               :character (current-column))))
                                        :contents)
                             :value))))
    (let ((json (json-encode
                 (list (cons 'mode (symbol-name major-mode))
                       (cons 'server (and server (eglot--server-info server)))
                       (cons 'hover hover)
                       (cons 'diagnostics
                             (vconcat (mapcar (lambda (d)
                                                (list (cons 'line (1- (line-number-at-pos (flymake-diagnostic-beg d))))
                                                      (cons 'code (funcall code-of d))
                                                      (cons 'type (symbol-name (flymake-diagnostic-type d)))
                                                      (cons 'text (flymake-diagnostic-text d))))
                                              diagnostics)))))))
      (with-temp-file (getenv "RCA_OUT") (insert json)))
    (when server (eglot-shutdown server))))
(kill-emacs 0)
