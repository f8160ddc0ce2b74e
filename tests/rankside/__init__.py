"""The rank side (``jupyter_trainer/rankside/``): what is shipped, the runtime and boot in real
processes, a rank's files and working directory, its system figures, framework capture, ONNX
export, the debugger and redaction."""
