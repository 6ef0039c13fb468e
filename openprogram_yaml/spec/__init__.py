"""Reading the YAML files: text → positioned YAML → ``*Spec`` models. Nothing runs here.

``textfile`` reads a file safely, ``yamlread`` parses it keeping the line and column of every
node, ``env`` expands ``${env:…}``, ``models`` holds the pydantic ``*Spec`` models (unknown
keys are errors), ``loader`` validates a document into them, ``diagnostics`` turns problems
into ``path:line:col: error:`` lines, and ``schema`` gives the JSON Schemas in ``schemas/``.
PyYAML is imported here and nowhere else; this package knows nothing of the runtime.
"""
