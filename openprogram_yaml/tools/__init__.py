"""Tool kinds a YAML agent declares, one module each: ``python``, ``http`` and ``command``
(``base`` holds what they share: ``ConfiguredTool``, a spec the model sees and
``async execute(**arguments)``).

The compiler builds them from the spec models; templates arrive already compiled, so this
package never imports Jinja2, and the http tool reaches the network only through the shared
client of ``providers.http_client``. Import each kind from its module: this package
re-exports nothing.
"""
